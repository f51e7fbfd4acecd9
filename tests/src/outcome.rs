//! How one QEMU run ended, as seen from the host, and the exit status `xtask` reports for it.

use std::time::Duration;

use tsumugi_abi::exit::describe_guest_status;

/// `xtask`'s exit status when QEMU failed or the guest ended without reporting a status.
pub const EXIT_CODE_NO_GUEST_STATUS: u8 = 1;

/// `xtask`'s exit status when the harness had to stop QEMU (the value `timeout(1)` uses).
pub const EXIT_CODE_TIMED_OUT: u8 = 124;

/// How a QEMU run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The guest reported this status (see `tsumugi_abi::exit`).
    Guest(u8),
    /// QEMU exited without the guest reporting a status; on x86_64 a triple fault with
    /// `-no-reboot` ends this way.
    NoStatus,
    /// The harness killed QEMU after this long.
    TimedOut(Duration),
    /// QEMU itself failed (bad arguments, missing firmware, killed by a signal...).
    QemuFailed(String),
}

impl Outcome {
    /// A one-line explanation for the user.
    pub fn describe(&self) -> String {
        match self {
            Outcome::Guest(status) => {
                format!("guest status {status} ({})", describe_guest_status(*status))
            }
            Outcome::NoStatus => {
                "guest reset or powered off without reporting a status (triple fault?)".to_string()
            }
            Outcome::TimedOut(after) => format!("timed out after {} s", after.as_secs()),
            Outcome::QemuFailed(why) => format!("QEMU failed: {why}"),
        }
    }

    /// The exit status `xtask run` ends with: the guest status itself, or a fixed code when
    /// there is none.
    pub fn exit_code(&self) -> u8 {
        match self {
            Outcome::Guest(status) => *status,
            Outcome::NoStatus | Outcome::QemuFailed(_) => EXIT_CODE_NO_GUEST_STATUS,
            Outcome::TimedOut(_) => EXIT_CODE_TIMED_OUT,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tsumugi_abi::exit::STATUS_KERNEL_PANIC;

    #[test]
    fn exit_codes_follow_the_guest() {
        assert_eq!(Outcome::Guest(0).exit_code(), 0);
        assert_eq!(
            Outcome::Guest(STATUS_KERNEL_PANIC).exit_code(),
            STATUS_KERNEL_PANIC
        );
        assert_eq!(Outcome::NoStatus.exit_code(), EXIT_CODE_NO_GUEST_STATUS);
        assert_eq!(
            Outcome::QemuFailed("x".into()).exit_code(),
            EXIT_CODE_NO_GUEST_STATUS
        );
        assert_eq!(
            Outcome::TimedOut(Duration::from_secs(8)).exit_code(),
            EXIT_CODE_TIMED_OUT
        );
    }

    #[test]
    fn descriptions_name_the_cause() {
        assert_eq!(Outcome::Guest(0).describe(), "guest status 0 (success)");
        assert!(Outcome::NoStatus.describe().contains("triple fault"));
        assert_eq!(
            Outcome::TimedOut(Duration::from_secs(8)).describe(),
            "timed out after 8 s"
        );
    }
}
