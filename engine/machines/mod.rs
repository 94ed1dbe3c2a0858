//! One module per machine. Each has `check` (semantic, structural, pre-payment; no I/O) and,
//! once implemented, one `observe` entry that does the paid work.

use serde_json::Value;

use crate::api_error::ApiError;
use crate::manifest::Machine;

pub mod vm01;
pub mod vm02;
pub mod vm03;
pub mod vm04;
pub mod vm05;
pub mod vm06;
pub mod vm07;
pub mod vm08;
pub mod vm09;
pub mod vm10;
pub mod vm11;

/// A machine's pre-payment semantic check.
pub type Check = fn(&Machine, &Value) -> Result<(), ApiError>;

/// The semantic check of a machine id; None for an id that is not a machine.
pub fn check_for(id: &str) -> Option<Check> {
    let check: Check = match id {
        "VM01" => vm01::check,
        "VM02" => vm02::check,
        "VM03" => vm03::check,
        "VM04" => vm04::check,
        "VM05" => vm05::check,
        "VM06" => vm06::check,
        "VM07" => vm07::check,
        "VM08" => vm08::check,
        "VM09" => vm09::check,
        "VM10" => vm10::check,
        "VM11" => vm11::check,
        _ => return None,
    };
    Some(check)
}
