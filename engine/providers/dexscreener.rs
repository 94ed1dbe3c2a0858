//! DexScreener pair prices (VM03).
