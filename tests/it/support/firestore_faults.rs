//! A forwarding stub in front of the shared Firestore emulator that answers chosen requests
//! itself: traffic is real except for the answers a test injects, so a test can put an answer
//! the emulator never gives (an error element inside a `200` stream, a body that is not JSON,
//! …) into an otherwise ordinary conversation, and count what was sent.
//!
//! ```ignore
//! let faulty = FaultyFirestore::start();
//! let backend = faulty.builder().build().unwrap();
//! faulty.inject("runQuery", 1, Injected::replace(200, r#"[{"error":{"status":"UNAVAILABLE"}}]"#));
//! ```

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::Value;
use syncguard::firestore::{FirestoreBackend, FirestoreBuilder};

use super::http::{StubRequest, StubResponse, StubServer};
use super::{FIRESTORE_PROJECT, shared_firestore};

/// Rewrites the emulator's JSON answer into the body to send instead.
type Rewrite = dyn Fn(Value) -> Vec<u8> + Send + Sync;

/// What the client gets instead of the emulator's answer.
#[derive(Clone)]
pub enum Injected {
    /// This answer; the request never reaches the emulator (a write does not happen).
    Replace { status: u16, body: Vec<u8> },
    /// The request goes to the emulator (a write happens); its `200` JSON answer is rewritten.
    Rewrite(Arc<Rewrite>),
    /// The request goes to the emulator (a write happens), and the client gets no answer: the
    /// connection is closed instead.
    LoseAnswer,
    /// The request goes to the emulator (a write happens), and the answer is held back until
    /// [`FaultyFirestore::release_withheld`] (or the stub is dropped), then lost: the client
    /// times out waiting for it.
    Withhold,
}

impl Injected {
    /// Answers `status` with `body` as it is (JSON or not), without asking the emulator.
    pub fn replace(status: u16, body: impl Into<Vec<u8>>) -> Injected {
        Injected::Replace {
            status,
            body: body.into(),
        }
    }

    /// Forwards the request and sends `rewrite(answer)` instead of the answer.
    pub fn rewrite(rewrite: impl Fn(Value) -> Value + Send + Sync + 'static) -> Injected {
        Injected::Rewrite(Arc::new(move |answer| {
            rewrite(answer).to_string().into_bytes()
        }))
    }

    /// Forwards the request and sends the body `rewrite(answer)` instead of the answer
    /// (e.g. cut short, or not JSON at all).
    pub fn rewrite_body(rewrite: impl Fn(Value) -> Vec<u8> + Send + Sync + 'static) -> Injected {
        Injected::Rewrite(Arc::new(rewrite))
    }
}

/// A gate that withheld answers wait at until it opens.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut open = lock(&self.open);
        while !*open {
            open = self
                .opened
                .wait(open)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn open(&self) {
        *lock(&self.open) = true;
        self.opened.notify_all();
    }
}

/// An injection waiting for requests.
struct Rule {
    /// The call it applies to (`runQuery`, `commit`, …): the path ends with `:{verb}`.
    verb: String,
    remaining: usize,
    answer: Injected,
}

/// The stub and its injections. Dropping it stops the stub.
pub struct FaultyFirestore {
    rules: Arc<Mutex<VecDeque<Rule>>>,
    gate: Arc<Gate>,
    stub: StubServer,
}

impl Drop for FaultyFirestore {
    /// Lets withheld answers go, so that the stub's connection threads end.
    fn drop(&mut self) {
        self.gate.open();
    }
}

impl FaultyFirestore {
    /// A stub in front of [`shared_firestore`], passing everything through until told
    /// otherwise.
    pub fn start() -> FaultyFirestore {
        let upstream = format!("http://{}", shared_firestore().host());
        let rules: Arc<Mutex<VecDeque<Rule>>> = Arc::default();
        let agent = ureq::Agent::new_with_config(
            ureq::Agent::config_builder()
                .timeout_global(Some(Duration::from_secs(30)))
                .http_status_as_error(false)
                .build(),
        );
        let handler_rules = Arc::clone(&rules);
        let gate = Arc::new(Gate::default());
        let handler_gate = Arc::clone(&gate);
        let stub = StubServer::start(move |request| {
            let injected = take_rule(&handler_rules, &request.path);
            match injected {
                Some(Injected::Replace { status, body }) => StubResponse {
                    status,
                    headers: vec![("Content-Type".to_owned(), "application/json".to_owned())],
                    body,
                },
                Some(Injected::Rewrite(rewrite)) => {
                    let real = forward(&agent, &upstream, request);
                    assert_eq!(real.status, 200, "a rewritten call must succeed upstream");
                    let answer = serde_json::from_slice(&real.body).expect("the emulator's JSON");
                    StubResponse {
                        body: rewrite(answer),
                        ..real
                    }
                }
                Some(Injected::LoseAnswer) => {
                    forward(&agent, &upstream, request);
                    StubResponse::hang_up()
                }
                Some(Injected::Withhold) => {
                    forward(&agent, &upstream, request);
                    handler_gate.wait();
                    StubResponse::hang_up()
                }
                None => forward(&agent, &upstream, request),
            }
        });
        FaultyFirestore { rules, gate, stub }
    }

    /// `127.0.0.1:PORT`, for [`FirestoreBuilder::emulator_host`].
    pub fn host(&self) -> String {
        self.stub.host()
    }

    /// A builder for a backend that talks to the emulator through this stub, with a
    /// [`PATIENT`](super::PATIENT) timeout.
    pub fn builder(&self) -> FirestoreBuilder {
        FirestoreBackend::builder()
            .project(FIRESTORE_PROJECT)
            .emulator_host(self.host())
            .timeout(super::PATIENT)
    }

    /// The next `times` requests for `verb` (`runQuery`, `batchGet`, `commit`, `batchWrite`)
    /// get `answer`. Injections queue up in the order given.
    pub fn inject(&self, verb: &str, times: usize, answer: Injected) {
        lock(&self.rules).push_back(Rule {
            verb: verb.to_owned(),
            remaining: times,
            answer,
        });
    }

    /// Lets the answers held back by [`Injected::Withhold`] go (they are lost: the client
    /// has given up on them).
    pub fn release_withheld(&self) {
        self.gate.open();
    }

    /// Injected answers not yet sent.
    pub fn pending(&self) -> usize {
        lock(&self.rules).iter().map(|rule| rule.remaining).sum()
    }

    /// Forgets the injections not yet sent.
    pub fn clear(&self) {
        lock(&self.rules).clear();
    }

    /// Requests for `verb` received so far, injected or passed on.
    pub fn count(&self, verb: &str) -> usize {
        let suffix = format!(":{verb}");
        self.stub
            .requests()
            .iter()
            .filter(|request| request.path.ends_with(&suffix))
            .count()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The answer of the first injection that applies to `path`, used up once.
fn take_rule(rules: &Mutex<VecDeque<Rule>>, path: &str) -> Option<Injected> {
    let mut rules = lock(rules);
    let index = rules
        .iter()
        .position(|rule| rule.remaining > 0 && path.ends_with(&format!(":{}", rule.verb)))?;
    let rule = &mut rules[index];
    rule.remaining -= 1;
    let answer = rule.answer.clone();
    if rule.remaining == 0 {
        rules.remove(index);
    }
    Some(answer)
}

/// `request` sent on to the emulator, and its answer.
fn forward(agent: &ureq::Agent, upstream: &str, request: &StubRequest) -> StubResponse {
    let url = format!("{upstream}{}", request.path);
    let mut call = agent.post(&url).header("Content-Type", "application/json");
    if let Some(authorization) = request.header("authorization") {
        call = call.header("Authorization", authorization);
    }
    assert_eq!(request.method, "POST", "the backend only POSTs");
    let response = call
        .send(&request.body[..])
        .expect("the emulator answers the forwarded request");
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .read_to_vec()
        .expect("the emulator's answer body");
    StubResponse {
        status,
        headers: vec![("Content-Type".to_owned(), "application/json".to_owned())],
        body,
    }
}
