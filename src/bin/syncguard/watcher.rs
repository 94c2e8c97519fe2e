//! The watcher: a forked child of `run` that ends the command's process group when `run` can
//! no longer do it itself — because `run` died (SIGKILL passes nothing on, and the kernel's
//! parent-death signal reaches only the group's leader), or because `run` is not being
//! scheduled (stopped, starved of CPU, swapped out) while the lease's local deadline passes.
//!
//! `run` tells it, through a pipe whose write end only `run` holds, each local deadline the
//! lease reached (the last confirmed renewal's send time plus the TTL), that `run` itself has
//! begun to end the group, or that it may exit (the group is gone). The watcher keeps the
//! deadline on the same clock (`CLOCK_MONOTONIC`) and, when no later one comes in time, sends
//! the group SIGTERM at `deadline − grace/2` (unless `run` already began ending it: its own
//! SIGTERM went out at `deadline − grace`) and SIGKILL at the deadline, so that the group is
//! gone before the store's record can expire — the record never expires before the local
//! deadline, which is taken from the renewal's send time. It acts later than `run`'s own
//! timers, so that a `run` that is scheduled stays the one that ends the group (and says why);
//! the grace the command gets from the watcher is half of `--grace`.
//!
//! End of file on the pipe (`run` died) ends the group at once with SIGKILL. The watcher
//! ignores the signals `run` forwards, so that a Ctrl-C to the terminal's group does not end
//! it, and it stays in `run`'s own process group: a SIGSTOP to `run` alone does not stop it.

use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::time::{Duration, Instant};

/// One message on the pipe: a tag byte and 8 bytes of value; written whole by one `write`
/// (far below `PIPE_BUF`, so never interleaved or split).
const MESSAGE_LEN: usize = 9;
/// The lease's local deadline is the value (nanoseconds of `CLOCK_MONOTONIC`).
const TAG_DEADLINE: u8 = b'D';
/// `run` has begun to end the group: only the SIGKILL at the deadline is left to the watcher.
const TAG_ENDING: u8 = b'E';
/// The group is gone: exit without a signal.
const TAG_DISMISS: u8 = b'X';

/// The running watcher, seen from `run`: the pipe's write end.
pub struct Watcher {
    pipe: OwnedFd,
}

impl Watcher {
    /// Forks the watcher of the group `pgid`; `grace` is `--grace`.
    #[cfg(not(target_os = "linux"))]
    pub fn start(_pgid: libc::pid_t, _grace: Duration) -> io::Result<Watcher> {
        Err(io::ErrorKind::Unsupported.into())
    }

    /// Forks the watcher of the group `pgid`; `grace` is `--grace`.
    #[cfg(target_os = "linux")]
    pub fn start(pgid: libc::pid_t, grace: Duration) -> io::Result<Watcher> {
        let grace_ns = i64::try_from(grace.as_nanos()).unwrap_or(i64::MAX);
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two descriptors into the array it is given, which lives across
        // the call. O_CLOEXEC: no program `run` starts inherits them.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned by nothing else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // `run` must never block on a watcher that does not read (stopped with it, say): a
        // message that does not fit is dropped, and the watcher acts on the ones it has.
        // SAFETY: fcntl on a descriptor we own, with integer arguments.
        unsafe {
            let flags = libc::fcntl(write.as_raw_fd(), libc::F_GETFL);
            if flags < 0
                || libc::fcntl(write.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        // SAFETY: in the child, only async-signal-safe calls follow (`watch`), ending in
        // `_exit`: nothing of the parent's other threads (locks, allocator) is touched.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            0 => watch(read.as_raw_fd(), write.as_raw_fd(), pgid, grace_ns),
            _ => {
                drop(read);
                Ok(Watcher { pipe: write })
            }
        }
    }

    /// The lease's local deadline is now `deadline`: the watcher ends the group by then unless
    /// a later one comes.
    pub fn hold_until(&self, deadline: Instant) {
        // The deadline on CLOCK_MONOTONIC, the watcher's clock: read both clocks together.
        let now = Instant::now();
        let now_ns = monotonic_ns();
        let ahead = |span: Duration| i64::try_from(span.as_nanos()).unwrap_or(i64::MAX);
        let deadline_ns = if deadline >= now {
            now_ns.saturating_add(ahead(deadline - now))
        } else {
            now_ns.saturating_sub(ahead(now - deadline))
        };
        self.send(TAG_DEADLINE, deadline_ns);
    }

    /// `run` has begun to end the group itself (SIGTERM sent): the watcher leaves the grace to
    /// `run` and only makes sure of the SIGKILL at the deadline.
    pub fn ending(&self) {
        self.send(TAG_ENDING, 0);
    }

    /// The group is gone (or no longer ours to end): tells the watcher to exit without a
    /// signal.
    pub fn dismiss(self) {
        self.send(TAG_DISMISS, 0);
    }

    fn send(&self, tag: u8, value: i64) {
        let mut message = [0u8; MESSAGE_LEN];
        message[0] = tag;
        message[1..].copy_from_slice(&value.to_ne_bytes());
        // SAFETY: write reads MESSAGE_LEN bytes from a local array that lives across the call.
        // A failure (the watcher is gone, or its pipe is full) leaves nothing to do.
        let _ = unsafe {
            libc::write(
                self.pipe.as_raw_fd(),
                message.as_ptr().cast::<libc::c_void>(),
                MESSAGE_LEN,
            )
        };
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds; async-signal-safe (no allocation).
fn monotonic_ns() -> i64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the local timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut now) };
    now.tv_sec
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec)
}

/// What the watcher does next about the lease's deadline.
#[derive(Clone, Copy)]
struct Schedule {
    /// The deadline, if one is known and the SIGKILL at it is still to be sent.
    deadline_ns: Option<i64>,
    /// Whether the group still needs its SIGTERM (`run` has not sent one, nor the watcher).
    term_pending: bool,
}

impl Schedule {
    /// When the SIGTERM is due: half the grace before the deadline.
    fn term_at(self, grace_ns: i64) -> Option<i64> {
        self.deadline_ns
            .filter(|_| self.term_pending)
            .map(|deadline| deadline.saturating_sub(grace_ns / 2))
    }

    /// The next moment something is due, if any.
    fn next(self, grace_ns: i64) -> Option<i64> {
        match self.term_at(grace_ns) {
            Some(term_at) => Some(term_at),
            None => self.deadline_ns,
        }
    }
}

/// The watcher's life, in the forked child: async-signal-safe calls only, no allocation.
#[cfg(target_os = "linux")]
fn watch(read: libc::c_int, write: libc::c_int, pgid: libc::pid_t, grace_ns: i64) -> ! {
    // SAFETY: plain system calls on integers and on local buffers that live across them;
    // `_exit` never returns.
    unsafe {
        libc::close(write);
        for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
            libc::signal(signal, libc::SIG_IGN);
        }
        let mut schedule = Schedule {
            deadline_ns: None,
            term_pending: true,
        };
        let mut message = [0u8; MESSAGE_LEN];
        let mut filled = 0usize;
        loop {
            let now = monotonic_ns();
            if schedule.term_at(grace_ns).is_some_and(|at| now >= at) {
                schedule.term_pending = false;
                libc::kill(-pgid, libc::SIGTERM);
                libc::kill(-pgid, libc::SIGCONT);
            }
            if schedule.deadline_ns.is_some_and(|at| now >= at) {
                schedule.deadline_ns = None;
                libc::kill(-pgid, libc::SIGKILL);
            }
            // Rounded up: waking a little late is the clock's granularity, never early.
            let timeout_ms = match schedule.next(grace_ns) {
                Some(at) => {
                    let ms = at.saturating_sub(now).saturating_add(999_999) / 1_000_000;
                    libc::c_int::try_from(ms.max(0)).unwrap_or(libc::c_int::MAX)
                }
                None => -1,
            };
            let mut waiting = libc::pollfd {
                fd: read,
                events: libc::POLLIN,
                revents: 0,
            };
            if libc::poll(&raw mut waiting, 1, timeout_ms) <= 0 {
                // A timeout (something is due) or EINTR: look again.
                continue;
            }
            let got = libc::read(
                read,
                message[filled..].as_mut_ptr().cast::<libc::c_void>(),
                MESSAGE_LEN - filled,
            );
            if got < 0 {
                // Reads errno; allocates nothing.
                match io::Error::last_os_error().raw_os_error() {
                    Some(libc::EINTR | libc::EAGAIN) => continue,
                    _ => break,
                }
            }
            if got == 0 {
                // End of file: `run` died without dismissing us.
                libc::kill(-pgid, libc::SIGKILL);
                break;
            }
            filled += got.unsigned_abs();
            if filled < MESSAGE_LEN {
                continue;
            }
            filled = 0;
            let mut value = [0u8; 8];
            value.copy_from_slice(&message[1..]);
            match message[0] {
                TAG_DEADLINE => schedule.deadline_ns = Some(i64::from_ne_bytes(value)),
                TAG_ENDING => schedule.term_pending = false,
                TAG_DISMISS => break,
                _ => {}
            }
        }
        libc::_exit(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigterm_half_the_grace_before_the_deadline_then_sigkill_at_it() {
        let grace_ns = 1_000;
        let mut schedule = Schedule {
            deadline_ns: Some(10_000),
            term_pending: true,
        };
        assert_eq!(schedule.term_at(grace_ns), Some(9_500));
        assert_eq!(schedule.next(grace_ns), Some(9_500));
        // `run` sent its own SIGTERM (or the watcher did): only the SIGKILL is left.
        schedule.term_pending = false;
        assert_eq!(schedule.term_at(grace_ns), None);
        assert_eq!(schedule.next(grace_ns), Some(10_000));
        // No deadline known (`--on-lost warn`, or after the SIGKILL): nothing is due.
        schedule.deadline_ns = None;
        assert_eq!(schedule.next(grace_ns), None);
    }
}
