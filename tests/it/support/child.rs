//! Running one test of this binary again, in a child process: for tests that need a process of
//! their own (an environment of their own, several processes, or an exact count of threads).
//!
//! The test the child runs is `#[ignore]`d, so a normal run skips it, and does nothing unless
//! its parent set the environment variable it reads. The parent selects it by its full name with
//! `--exact`, so exactly that test runs, and checks that the child reported it passed: a filter
//! that matched nothing would otherwise look like success.

use std::process::{Command, ExitStatus, Output};

/// The full name libtest gives the test function `$test` of the calling module
/// (`area::function`, without the binary's name). Naming a function that does not exist fails
/// the build, so a renamed worker test cannot leave a stale filter behind.
macro_rules! test_name {
    ($test:ident) => {{
        let _exists: fn() = $test;
        $crate::support::child::without_crate(concat!(module_path!(), "::", stringify!($test)))
    }};
}
pub(crate) use test_name;

/// `path` without its first segment, the crate's name.
pub fn without_crate(path: &'static str) -> &'static str {
    path.split_once("::").map_or(path, |(_, rest)| rest)
}

/// A command that runs exactly the (ignored) test `name` of this binary on one test thread.
/// What it prints on stdout goes to [`assert_passed`].
pub fn one_test(name: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("the test binary"));
    command.args([name, "--exact", "--ignored", "--test-threads=1"]);
    command
}

/// Why the child, finished with `status` after printing `stdout` and `stderr`, did not run the
/// test `name` to success; `None` when it did.
pub fn failure(name: &str, status: ExitStatus, stdout: &str, stderr: &str) -> Option<String> {
    let passed = status.success() && stdout.contains(&format!("test {name} ... ok"));
    (!passed).then(|| {
        format!(
            "the child process running {name} failed ({status}); its stdout:\n{stdout}\nits \
             stderr:\n{stderr}"
        )
    })
}

/// Fails unless the child ran the test `name` and it passed (see [`failure`]).
#[track_caller]
pub fn assert_passed(name: &str, status: ExitStatus, stdout: &str, stderr: &str) {
    if let Some(failure) = failure(name, status, stdout, stderr) {
        panic!("{failure}");
    }
}

/// [`assert_passed`] for a child's collected output.
#[track_caller]
pub fn assert_output_passed(name: &str, output: &Output) {
    assert_passed(
        name,
        output.status,
        &String::from_utf8_lossy(&output.stdout),
        &String::from_utf8_lossy(&output.stderr),
    );
}
