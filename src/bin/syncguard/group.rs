//! The command `run` supervises, as a process group of its own: started as the group's
//! leader, signalled as a whole, and watched until every process in it is gone.
//!
//! A lock must outlive every process that works under it, not only the one `run` started: a
//! shell script's background jobs and subshells would otherwise go on writing after the lock
//! was released. `flock(1)` gets this from the lock file every descendant inherits; here the
//! command's process group plays that part. On Linux, `run` is also a child subreaper, so
//! descendants orphaned by the command's exit become `run`'s children (not init's) and are
//! reaped here — a zombie still counts as a member of its group, so without the reaping the
//! group would never be seen to end.
//!
//! Processes that leave the group (`setsid`, `setpgid`) leave the lock's protection too, as a
//! process that closes its descriptors does under `flock(1)`.
//!
//! If `run` itself is killed (SIGKILL passes nothing on), the kernel kills the group's leader
//! with it on Linux (a parent-death signal), and a [`Watcher`] — a forked child of `run` —
//! kills the rest of the group; the watcher also ends the group at the lease's local deadline
//! when `run` is not scheduled to do it (see [`crate::watcher`]).

use std::io;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::process::{Command, ExitStatus};
use std::thread;
use std::time::Duration;

use crate::watcher::Watcher;

/// The command's process group: its leader is the command itself.
pub struct Group {
    /// The group's id, which is its leader's pid.
    pgid: libc::pid_t,
}

/// Makes this process a child subreaper (Linux only; elsewhere orphans go to init, which reaps
/// them, and the group is still watched through `kill(-pgid, 0)`). Best effort: on failure,
/// only the reaping of orphans is lost.
pub fn become_subreaper() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl(PR_SET_CHILD_SUBREAPER, 1) takes plain integers and changes only a flag
        // of this process; no memory of ours is read or written.
        let done = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        if done != 0 {
            eprintln!(
                "syncguard: could not become a child subreaper ({}); orphaned processes of the \
                 command are reaped by init instead",
                io::Error::last_os_error()
            );
        }
    }
}

/// Has the command (the group's leader) get SIGKILL from the kernel when `run` dies (Linux
/// only), so that a `run` killed with SIGKILL, which can pass nothing on, does not leave its
/// command running unwatched while the lease runs out. Only the leader gets it: other members
/// of the group, the leader's own children among them, run on (see docs/cli.md).
///
/// The kernel sends it when the *thread* that forked the child ends: `run` spawns the command
/// from its main thread, which lives as long as the process.
fn set_parent_death_signal(command: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getpid takes nothing and touches no memory.
        let parent = unsafe { libc::getpid() };
        let arm = move || {
            // SAFETY: runs in the forked child before exec, where only async-signal-safe
            // calls are allowed: prctl and getppid are system calls on plain integers, and
            // `from_raw_os_error` allocates nothing.
            unsafe {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // `run` died before the signal was armed: it will never come.
                if libc::getppid() != parent {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
            }
            Ok(())
        };
        // SAFETY: the closure only makes async-signal-safe calls (see above).
        unsafe { command.pre_exec(arm) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = command;
}

impl Group {
    /// Starts `command` as the leader of a new process group and a thread that reaps every
    /// child of this process; `on_exit` gets the command's own exit status.
    ///
    /// This process must have no other children to wait for: the reaper takes them all.
    pub fn spawn(
        command: &mut Command,
        on_exit: impl FnOnce(io::Result<ExitStatus>) + Send + 'static,
    ) -> io::Result<Group> {
        set_parent_death_signal(command);
        let child = command.process_group(0).spawn()?;
        let pgid = libc::pid_t::try_from(child.id())
            .map_err(|_| io::Error::other("the command's process id is out of range"))?;
        // Reaped by the thread below, never through `child`.
        drop(child);
        let reaper = thread::Builder::new()
            .name("syncguard-reap".to_owned())
            .spawn(move || reap(pgid, on_exit));
        if let Err(error) = reaper {
            let group = Group { pgid };
            group.signal(libc::SIGKILL);
            return Err(error);
        }
        Ok(Group { pgid })
    }

    /// Sends `signal` to every process in the group; a stopped group (e.g. one that read the
    /// terminal from the background) is sent `SIGCONT` after it, so that the signal is acted on.
    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) takes plain integers and touches no memory of ours. A negative pid
        // names the group. Its id cannot name another group while the leader is unreaped; after
        // that, the caller stops signalling once `is_gone` says so, and a new group could get
        // this id in between only if the pids wrapped around within that moment.
        unsafe { libc::kill(-self.pgid, signal) };
        if signal != libc::SIGKILL && signal != libc::SIGCONT {
            // SAFETY: as above.
            unsafe { libc::kill(-self.pgid, libc::SIGCONT) };
        }
    }

    /// Starts a [`Watcher`] that kills the whole group if `run` dies before
    /// [`Watcher::dismiss`], and ends it at the lease's local deadline it is told of
    /// ([`Watcher::hold_until`]) with half of `grace` for the SIGTERM. `None` (with a warning)
    /// if it cannot start: the leader's parent-death signal is still armed, and `run`'s own
    /// timers still end the group at the deadline while `run` is scheduled.
    pub fn watch(&self, grace: Duration) -> Option<Watcher> {
        match Watcher::start(self.pgid, grace) {
            Ok(watcher) => Some(watcher),
            Err(error) => {
                eprintln!(
                    "syncguard: could not start the watcher that ends the command's process \
                     group if run dies or stalls ({error}); only the command itself would be \
                     killed if run died"
                );
                None
            }
        }
    }

    /// Whether no process is left in the group (zombies count until they are reaped).
    pub fn is_gone(&self) -> bool {
        // SAFETY: signal 0 only checks that the group exists; see `signal`.
        let result = unsafe { libc::kill(-self.pgid, 0) };
        // EPERM: a member exists that we may not signal (it changed its user): still there.
        result != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    }
}

/// Reaps every child of this process until none is left, handing the leader's status to
/// `on_exit`.
fn reap(leader: libc::pid_t, on_exit: impl FnOnce(io::Result<ExitStatus>)) {
    let mut on_exit = Some(on_exit);
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid writes the status into the local integer whose address it is given,
        // which lives across the call.
        let pid = unsafe { libc::waitpid(-1, &raw mut status, 0) };
        if pid == leader {
            if let Some(report) = on_exit.take() {
                report(Ok(ExitStatus::from_raw(status)));
            }
        } else if pid < 0 {
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EINTR) => {}
                // No child left: with the subreaper flag, no descendant is left either.
                Some(libc::ECHILD) => break,
                _ => {
                    if let Some(report) = on_exit.take() {
                        report(Err(error));
                    }
                    return;
                }
            }
        }
    }
    if let Some(report) = on_exit.take() {
        report(Err(io::Error::other(
            "the command was reaped elsewhere: its exit status is unknown",
        )));
    }
}
