//! Who holds a lock the command takes: the holder description `acquire` and `run` store with
//! it, which `status` shows.
//!
//! Defaults: `run` stores `HOST:PID PROGRAM` (its own pid: the process that holds the lock
//! while the command runs, and the file name of the program it runs — never its arguments,
//! which carry passwords as often as not, and anyone who may run `status` or `list` sees the
//! holder); `acquire` stores `HOST:PPID`
//! (its parent's pid: `acquire` exits at once, and the lock belongs to the script that ran it
//! until that script releases it). `--holder TEXT` replaces either.

use std::ffi::OsStr;
use std::path::Path;

use syncguard::LockError;
use syncguard::driver::Holder;

/// `--holder`, checked before any backend is reached (`InvalidArgument`: empty, over 256
/// bytes, or with a control or format character, named by its code point).
pub fn given(holder: &str) -> syncguard::Result<Holder> {
    Holder::new(holder)
        .map_err(|error| LockError::invalid_argument(format!("--holder: {}", error.message())))
}

/// `run`'s default: `HOST:PID PROGRAM`, PROGRAM being the file name of the command's
/// `argv[0]` (`/usr/bin/mysqldump` → `mysqldump`), whatever its encoding: bytes that are not
/// UTF-8 become U+FFFD (the command itself gets its name as it was given), then cleaned and
/// cut to fit as [`Holder::truncated`] does.
pub fn of_run(program: &OsStr) -> Option<Holder> {
    let name = Path::new(program)
        .file_name()
        .unwrap_or(program)
        .to_string_lossy();
    Holder::truncated(&format!("{}:{} {name}", hostname(), std::process::id()))
}

/// `break`'s operator: `HOST:PID syncguard`, this process, stored in the marker's note.
pub fn of_break() -> Option<Holder> {
    of_run(OsStr::new("syncguard"))
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
    fn run_describes_host_pid_and_program_file_name() {
        let prefix = format!("{}:{} ", hostname(), std::process::id());
        for (program, name) in [
            ("./job.sh", "job.sh"),
            ("/usr/bin/mysqldump", "mysqldump"),
            ("mysqldump", "mysqldump"),
            ("/opt/jobs/", "jobs"),
            ("..", ".."),
        ] {
            let holder = of_run(OsStr::new(program)).unwrap();
            assert_eq!(holder.as_str(), format!("{prefix}{name}"), "{program}");
        }
    }

    #[test]
    fn a_program_name_that_is_not_utf8_is_shown_lossily_and_cleaned() {
        use std::os::unix::ffi::OsStrExt as _;
        let prefix = format!("{}:{} ", hostname(), std::process::id());
        let program = OsStr::from_bytes(b"/tmp/x\xff/job\xff\x1b[2J\xe2\x80\xae.sh");
        let holder = of_run(program).unwrap();
        assert_eq!(holder.as_str(), format!("{prefix}job\u{FFFD} [2J.sh"));
    }

    #[test]
    fn a_long_program_name_is_cut_on_a_character_boundary() {
        let holder = of_run(OsStr::new(&format!("/bin/{}", "é".repeat(300)))).unwrap();
        assert!(holder.as_str().len() <= 256);
        assert!(holder.as_str().len() >= 255);
        assert!(holder.as_str().ends_with('é'));
    }

    #[test]
    fn given_holders_are_checked() {
        assert_eq!(given("ops on-call").unwrap().as_str(), "ops on-call");
        for bad in ["", "a\nb", "a\u{202E}b", &"x".repeat(257)] {
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
