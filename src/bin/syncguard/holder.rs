//! Who holds a lock the command takes: the holder description `acquire` and `run` store with
//! it, which `status` shows.
//!
//! Defaults: `run` stores `HOST:PID COMMAND…` (its own pid: the process that holds the lock
//! while the command runs, and the command line, cut to fit); `acquire` stores `HOST:PPID`
//! (its parent's pid: `acquire` exits at once, and the lock belongs to the script that ran it
//! until that script releases it). `--holder TEXT` replaces either.

use syncguard::LockError;
use syncguard::driver::Holder;

/// `--holder`, checked before any backend is reached (`InvalidArgument`: empty, over 256
/// bytes, or with a control character).
pub fn given(holder: &str) -> syncguard::Result<Holder> {
    Holder::new(holder)
        .map_err(|error| LockError::invalid_argument(format!("--holder: {}", error.message())))
}

/// `run`'s default: `HOST:PID COMMAND…`, cut on a character boundary to fit the 256 bytes.
pub fn of_run(command: &[String]) -> Option<Holder> {
    Holder::truncated(&format!(
        "{}:{} {}",
        hostname(),
        std::process::id(),
        command.join(" ")
    ))
}

/// `acquire`'s default: `HOST:PPID`, the process that ran `syncguard acquire`.
pub fn of_acquire() -> Option<Holder> {
    Holder::truncated(&format!(
        "{}:{}",
        hostname(),
        std::os::unix::process::parent_id()
    ))
}

/// This machine's host name (`gethostname(2)`), or `unknown-host` if it cannot be read.
fn hostname() -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: gethostname writes at most `buffer.len()` bytes into the buffer we own, which
    // outlives the call.
    let done = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) };
    if done != 0 {
        return "unknown-host".to_owned();
    }
    // POSIX leaves the terminating NUL out when the name is truncated: cut at the first NUL
    // or the end of the buffer.
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    match String::from_utf8_lossy(&buffer[..end]).trim() {
        "" => "unknown-host".to_owned(),
        name => name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_describes_host_pid_and_command() {
        let holder = of_run(&["./job.sh".to_owned(), "--full".to_owned()]).unwrap();
        let expected = format!("{}:{} ./job.sh --full", hostname(), std::process::id());
        assert_eq!(holder.as_str(), expected);
    }

    #[test]
    fn a_long_command_line_is_cut_on_a_character_boundary() {
        let holder = of_run(&["é".repeat(300)]).unwrap();
        assert!(holder.as_str().len() <= 256);
        assert!(holder.as_str().len() >= 255);
        assert!(holder.as_str().ends_with('é'));
    }

    #[test]
    fn given_holders_are_checked() {
        assert_eq!(given("ops on-call").unwrap().as_str(), "ops on-call");
        for bad in ["", "a\nb", &"x".repeat(257)] {
            let error = given(bad).unwrap_err();
            assert_eq!(error.code(), syncguard::ErrorCode::InvalidArgument);
            assert!(error.message().starts_with("--holder: "), "{error}");
        }
    }

    #[test]
    fn acquire_names_the_parent() {
        let holder = of_acquire().unwrap();
        assert!(
            holder
                .as_str()
                .ends_with(&format!(":{}", std::os::unix::process::parent_id())),
            "{holder:?}"
        );
    }
}
