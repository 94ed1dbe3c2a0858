//! alchemy_getTokenBalances inventory pagination (VM03).
