//! Firestore's v1 REST API over one agent with kept-alive connections (`super::transport`): requests, typed values, and server
//! times for the clock-skew estimate. Every answer is decoded and checked in `answer.rs`;
//! failures are [`RestError`]s (see `error.rs`), which the backend turns into `LockError`s at
//! its edge.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::auth::TokenProvider;
use super::skew::SkewEstimator;
use super::timestamp::parse_timestamp_ms;
use super::transport::{self, Agent};
use crate::error::LockError;

mod answer;
mod error;

pub(crate) use self::answer::{Document, integer_of, map_of, string_of};
pub(crate) use self::error::RestError;

/// The longest answer read (a `runQuery` that matched many documents, at most).
const MAX_ANSWER_BYTES: u64 = 64 << 20;

/// The production endpoint's host.
const PRODUCTION_HOST: &str = "firestore.googleapis.com";

/// A read-write transaction's id, as Firestore gave it (opaque, base64).
pub(crate) struct Transaction(String);

/// One database's documents endpoint, and the means to call it.
pub(crate) struct RestClient {
    agent: Agent,
    /// `…/v1/projects/{project}/databases/{database}/documents`
    documents_url: String,
    /// `projects/{project}/databases/{database}/documents`: the prefix of document names.
    documents_name: String,
    /// `Firestore at HOST (project P, database D)`, for messages.
    place: String,
    timeout: Duration,
    tokens: TokenProvider,
    pub skew: SkewEstimator,
    requests: AtomicU64,
}

impl RestClient {
    pub fn new(
        project: &str,
        database: &str,
        emulator_host: Option<&str>,
        tokens: TokenProvider,
        timeout: Duration,
        tls: Arc<rustls::ClientConfig>,
    ) -> RestClient {
        let agent = Agent::new(transport::Config {
            timeout,
            // Roots and crypto provider from crate::tls: the process-wide default is not used.
            tls,
            direct: false,
            // Answers are a few documents; a runQuery over a huge collection is bounded here.
            body_limit: MAX_ANSWER_BYTES,
            max_idle: 16,
        });
        let base = match emulator_host {
            Some(host) => format!("http://{host}"),
            None => format!("https://{PRODUCTION_HOST}"),
        };
        let host = emulator_host.unwrap_or(PRODUCTION_HOST);
        let documents_name = format!("projects/{project}/databases/{database}/documents");
        RestClient {
            agent,
            documents_url: format!("{base}/v1/{documents_name}"),
            documents_name,
            place: format!("Firestore at {host} (project {project}, database {database})"),
            timeout,
            tokens,
            skew: SkewEstimator::default(),
            requests: AtomicU64::new(0),
        }
    }

    /// The full resource name of a document.
    pub fn document_name(&self, collection: &str, id: &str) -> String {
        format!("{}/{collection}/{id}", self.documents_name)
    }

    /// The error the caller sees for a failed call: names the endpoint, the project and the
    /// database.
    pub fn lock_error(&self, error: RestError) -> LockError {
        error.into_lock_error(&self.place)
    }

    /// HTTP requests sent so far (token requests not included).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// POSTs `body` to `documents:{verb}` and decodes a success with `decode` (one of
    /// `answer.rs`); a success whose body is not JSON is a [`RestError::BadAnswer`]. Only an
    /// answer that decodes feeds the clock-skew estimate.
    fn post<T>(
        &self,
        verb: &'static str,
        body: &Value,
        decode: impl FnOnce(Value) -> Result<T, RestError>,
    ) -> Result<T, RestError> {
        let authorization = self
            .tokens
            .authorization()
            .map_err(RestError::Credentials)?;
        let url = format!("{}:{verb}", self.documents_url);
        self.requests.fetch_add(1, Ordering::Relaxed);
        let sent = Instant::now();
        let mut request = self
            .agent
            .post(&url)
            .header("Authorization", &authorization);
        if let Some(project) = self.tokens.quota_project_id() {
            // As Google's client libraries do: user credentials are billed to, and need, the
            // quota project their file names.
            request = request.header("x-goog-user-project", project);
        }
        let response = request
            .send_json(body)
            .map_err(|e| RestError::from_transport(e, self.timeout))?;
        let received = Instant::now();
        let status = response.status;
        let text = String::from_utf8_lossy(&response.body);
        if !(200..300).contains(&status) {
            // An error page that is not JSON still has its HTTP status to go by.
            let value = serde_json::from_str(&text).unwrap_or(Value::Null);
            return Err(RestError::from_answer(status, &value));
        }
        let value = answer::parse_body(verb, &text)?;
        let server_ms = server_time_ms(&value);
        let decoded = decode(value)?;
        if let Some(server_ms) = server_ms {
            self.skew.observe(server_ms, sent, received);
        }
        Ok(decoded)
    }

    /// Reads the documents `names` (full names) without a transaction: each one, in order,
    /// found or positively missing.
    pub fn batch_get<const N: usize>(
        &self,
        names: [&str; N],
    ) -> Result<[Option<Document>; N], RestError> {
        self.batch_get_in(None, names)
    }

    /// [`batch_get`](RestClient::batch_get) of as many documents as `names` holds (a set of
    /// keys' documents).
    pub fn batch_get_all(&self, names: &[&str]) -> Result<Vec<Option<Document>>, RestError> {
        self.batch_get_all_in(None, names)
    }

    /// [`batch_get`](RestClient::batch_get) inside the read-write `transaction`, when given
    /// ([`begin_transaction`](RestClient::begin_transaction)): the documents read, found or
    /// missing, are then locked against every other writer until it commits or rolls back.
    pub fn batch_get_in<const N: usize>(
        &self,
        transaction: Option<&Transaction>,
        names: [&str; N],
    ) -> Result<[Option<Document>; N], RestError> {
        self.batch_get_all_in(transaction, &names)?
            .try_into()
            .map_err(|_| RestError::bad_answer("batchGet", "not one answer per document asked for"))
    }

    fn batch_get_all_in(
        &self,
        transaction: Option<&Transaction>,
        names: &[&str],
    ) -> Result<Vec<Option<Document>>, RestError> {
        let mut body = json!({ "documents": names });
        if let Some(transaction) = transaction {
            body["transaction"] = json!(transaction.0);
        }
        self.post("batchGet", &body, |answer| answer::batch_get(answer, names))
    }

    /// Begins a read-write transaction, for an operation that must not lose the documents it
    /// reads to another writer before its commit (an operator's break): a commit of another
    /// writer that meets it waits for it (Firestore's transactions lock what they read). End it
    /// with [`commit_versions_in`](RestClient::commit_versions_in) or
    /// [`rollback`](RestClient::rollback): until then its documents stay locked.
    pub fn begin_transaction(&self) -> Result<Transaction, RestError> {
        let body = json!({ "options": { "readWrite": {} } });
        let id = self.post("beginTransaction", &body, answer::begin_transaction)?;
        Ok(Transaction(id))
    }

    /// Ends `transaction` without writing, and frees the documents it read.
    pub fn rollback(&self, transaction: &Transaction) -> Result<(), RestError> {
        let body = json!({ "transaction": transaction.0 });
        self.post("rollback", &body, |_| Ok(()))
    }

    /// Runs `query` (a `structuredQuery`): the documents it matches.
    pub fn run_query(&self, query: Value) -> Result<Vec<Document>, RestError> {
        let body = json!({ "structuredQuery": query });
        self.post("runQuery", &body, answer::run_query)
    }

    /// Commits `writes` atomically. `Ok(false)` when a write's precondition failed: a
    /// document changed since it was read, so the compare-and-set did not happen.
    pub fn commit(&self, writes: Vec<Value>) -> Result<bool, RestError> {
        Ok(self.commit_versions(writes)?.is_some())
    }

    /// [`commit`](RestClient::commit), answering each write's `updateTime` (its document's
    /// new version; `None` for a delete) when it happened.
    pub fn commit_versions(
        &self,
        writes: Vec<Value>,
    ) -> Result<Option<Vec<Option<String>>>, RestError> {
        self.commit_versions_within(None, writes)
    }

    /// [`commit_versions`](RestClient::commit_versions) of `writes` as the end of
    /// `transaction`.
    pub fn commit_versions_in(
        &self,
        transaction: &Transaction,
        writes: Vec<Value>,
    ) -> Result<Option<Vec<Option<String>>>, RestError> {
        self.commit_versions_within(Some(transaction), writes)
    }

    fn commit_versions_within(
        &self,
        transaction: Option<&Transaction>,
        writes: Vec<Value>,
    ) -> Result<Option<Vec<Option<String>>>, RestError> {
        let mut body = json!({ "writes": writes });
        if let Some(transaction) = transaction {
            body["transaction"] = json!(transaction.0);
        }
        match self.post("commit", &body, |answer| answer::commit(answer, &writes)) {
            Ok(times) => Ok(Some(times)),
            Err(error) if error.is_precondition_failure() => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Applies `updates` each on its own (not atomically), in one request: one answer per
    /// write, its new `updateTime` or why it failed (a precondition, say).
    pub fn batch_write(
        &self,
        updates: Vec<Value>,
    ) -> Result<Vec<Result<String, RestError>>, RestError> {
        let count = updates.len();
        let body = json!({ "writes": updates });
        self.post("batchWrite", &body, |answer| {
            answer::batch_write(answer, count)
        })
    }
}

/// The server time an answer carries (`commitTime`, or a `readTime`), in Unix ms.
fn server_time_ms(value: &Value) -> Option<i64> {
    let time = match value {
        Value::Object(map) => map.get("commitTime"),
        Value::Array(items) => items.iter().find_map(|item| item.get("readTime")),
        _ => None,
    }?;
    parse_timestamp_ms(time.as_str()?)
}

// --- typed values -----------------------------------------------------------------------------

pub(crate) fn string_value(value: &str) -> Value {
    json!({ "stringValue": value })
}

pub(crate) fn integer_value(value: i64) -> Value {
    // int64 travels as a decimal string in Firestore's JSON.
    json!({ "integerValue": value.to_string() })
}

pub(crate) fn array_value(values: Vec<Value>) -> Value {
    json!({ "arrayValue": { "values": values } })
}

pub(crate) fn map_value(fields: Value) -> Value {
    json!({ "mapValue": { "fields": fields } })
}
