//! Combining the writes of one backend to one document ([`Combiner`]): changes that callers
//! submit for a document while a write of it is in flight wait, and go together in the next
//! write — group commit, per document.
//!
//! Why: a semaphore's document is written by every acquisition, release and renewal of any of
//! its permits (and a key's fence counter document by every one of its readers'; `holders.rs`). Written one change per commit, the commits of one process race each other
//! (each reads the document, and only the first of those that read the same version commits);
//! a thousand permits renewed three times a second lost most of those races and gave up. One
//! writer per document and process at a time leaves only other processes to race with, and
//! one commit carries as many changes as arrived meanwhile. The writer also keeps what it
//! knows of the document between writes (a [`Change::Memo`]), e.g. the document as its last
//! commit left it, so that the next write need not read it first.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use crate::error::{LockError, Result};

/// The documents being written through one backend, by full document name.
pub(super) struct Combiner<C: Change> {
    documents: Mutex<HashMap<String, Arc<Turns<C>>>>,
}

impl<C: Change> Default for Combiner<C> {
    fn default() -> Self {
        Combiner {
            documents: Mutex::new(HashMap::new()),
        }
    }
}

/// One document's waiting changes and their answers.
struct Turns<C: Change> {
    state: Mutex<State<C>>,
    /// A write ended: its answers are in, and the next writer may start.
    written: Condvar,
}

impl<C: Change> Default for Turns<C> {
    fn default() -> Self {
        Turns {
            state: Mutex::new(State {
                waiting: Vec::new(),
                answered: HashMap::new(),
                writing: false,
                next_ticket: 0,
                memo: C::Memo::default(),
            }),
            written: Condvar::new(),
        }
    }
}

struct State<C: Change> {
    /// Changes not yet taken by a writer, with their tickets.
    waiting: Vec<(u64, C)>,
    /// Answers not yet collected by their submitters, by ticket.
    answered: HashMap<u64, Result<C::Answer>>,
    writing: bool,
    next_ticket: u64,
    /// What the last writer left for the next one.
    memo: C::Memo,
}

/// A change that a write of its document answers.
pub(super) trait Change {
    /// What the write answers for it.
    type Answer;
    /// What one write of a document leaves for the next (kept while the document is being
    /// written, forgotten when nobody is).
    type Memo: Default;
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<C: Change> Combiner<C> {
    /// Applies `changes` to the document `name` with `write`, together with the changes other
    /// threads submit for it meanwhile; one answer per change, in order. One thread at a time
    /// writes a document: the first to find nobody writing takes every change waiting (its
    /// own and others'), calls `write` with them and the memo the last writer left, and hands
    /// out the answers. `write` must answer every change it is given, in order; a missing
    /// answer is `Internal`.
    pub(super) fn submit(
        &self,
        name: &str,
        changes: Vec<C>,
        write: impl FnOnce(Vec<C>, &mut C::Memo) -> Vec<Result<C::Answer>>,
    ) -> Vec<Result<C::Answer>> {
        let turns = Arc::clone(lock(&self.documents).entry(name.to_owned()).or_default());
        let answers = turns.submit(changes, write);
        let mut documents = lock(&self.documents);
        // Nobody else holds it (a newcomer would have taken it from the map, under this lock):
        // forget it, so that the map holds only documents being written.
        if Arc::strong_count(&turns) == 2 {
            documents.remove(name);
        }
        answers
    }
}

impl<C: Change> Turns<C> {
    fn submit(
        &self,
        changes: Vec<C>,
        write: impl FnOnce(Vec<C>, &mut C::Memo) -> Vec<Result<C::Answer>>,
    ) -> Vec<Result<C::Answer>> {
        let mut state = lock(&self.state);
        let first = state.next_ticket;
        let count = changes.len() as u64;
        state.next_ticket += count;
        state.waiting.extend((first..).zip(changes));
        let tickets = first..first + count;
        let mut write = Some(write);
        loop {
            if tickets
                .clone()
                .all(|ticket| state.answered.contains_key(&ticket))
            {
                return tickets
                    .map(|ticket| {
                        state
                            .answered
                            .remove(&ticket)
                            .unwrap_or_else(|| Err(unanswered()))
                    })
                    .collect();
            }
            // Nobody writing and these changes unanswered: they are still waiting (a writer
            // takes every waiting change and answers each), so this thread writes.
            if !state.writing
                && let Some(write) = write.take()
            {
                state.writing = true;
                let (taken, changes): (Vec<u64>, Vec<C>) =
                    std::mem::take(&mut state.waiting).into_iter().unzip();
                let mut memo = std::mem::take(&mut state.memo);
                drop(state);
                // A panic here is a bug; the waiting threads must still get answers (and the
                // memo, which it may have left half made, is forgotten).
                let answers = catch_unwind(AssertUnwindSafe(|| write(changes, &mut memo)));
                state = lock(&self.state);
                let mut answers = match answers {
                    Ok(answers) => {
                        state.memo = memo;
                        answers.into_iter()
                    }
                    Err(_) => Vec::new().into_iter(),
                };
                for ticket in taken {
                    let answer = answers.next().unwrap_or_else(|| Err(unanswered()));
                    state.answered.insert(ticket, answer);
                }
                state.writing = false;
                self.written.notify_all();
                continue;
            }
            state = self
                .written
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

fn unanswered() -> LockError {
    LockError::internal("a change to a Firestore document was left unanswered")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Add(u64);
    impl Change for Add {
        type Answer = u64;
        type Memo = u64;
    }

    #[test]
    fn changes_that_meet_share_a_write_and_each_gets_its_answer() {
        let combiner = Arc::new(Combiner::<Add>::default());
        let writes = Arc::new(AtomicUsize::new(0));
        let total = Arc::new(Mutex::new(0u64));
        let start = Arc::new(Barrier::new(8));
        let threads: Vec<_> = (0..8u64)
            .map(|i| {
                let (combiner, writes, total, start) = (
                    Arc::clone(&combiner),
                    Arc::clone(&writes),
                    Arc::clone(&total),
                    Arc::clone(&start),
                );
                std::thread::spawn(move || {
                    start.wait();
                    let write = |changes: Vec<Add>, memo: &mut u64| {
                        writes.fetch_add(1, Ordering::SeqCst);
                        let mut total = total.lock().unwrap();
                        changes
                            .into_iter()
                            .map(|Add(n)| {
                                *total += n;
                                *memo += 1;
                                Ok(n * 2)
                            })
                            .collect()
                    };
                    let answers = combiner.submit("doc", vec![Add(i), Add(100 + i)], write);
                    let answers: Vec<u64> = answers.into_iter().map(Result::unwrap).collect();
                    assert_eq!(answers, vec![2 * i, 2 * (100 + i)]);
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(
            *total.lock().unwrap(),
            (0..8u64).map(|i| 100 + 2 * i).sum::<u64>()
        );
        assert!(writes.load(Ordering::SeqCst) <= 8);
        assert!(combiner.documents.lock().unwrap().is_empty(), "forgotten");
    }

    #[test]
    fn a_write_that_answers_too_little_or_panics_leaves_nobody_waiting() {
        let combiner = Combiner::<Add>::default();
        let answers = combiner.submit("doc", vec![Add(1), Add(2)], |_, _| vec![Ok(7)]);
        assert_eq!(answers[0].as_ref().ok(), Some(&7));
        assert!(answers[1].is_err());
        let answers = combiner.submit("doc", vec![Add(1)], |_, _| panic!("a bug"));
        assert!(answers[0].is_err());
        let answers = combiner.submit("doc", vec![Add(3)], |_, _| vec![Ok(3)]);
        assert_eq!(answers[0].as_ref().ok(), Some(&3));
    }
}
