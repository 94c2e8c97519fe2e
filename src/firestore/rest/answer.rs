//! Firestore's answers, decoded and checked in one place: each success answer the backend uses
//! becomes typed values here, or a [`RestError`]. An `{"error": …}` element anywhere in an
//! answer is that error; anything else that is not exactly the answer the call gives is
//! [`RestError::BadAnswer`]. Nothing reads as "no document" unless the answer says so: a
//! `batchGet` names the document `missing`, a `runQuery` stream carries only `readTime`s.
//!
//! Shapes, as Firestore's v1 REST API and its emulator send them:
//! - `batchGet`: `[{"found": DOC, "readTime": T} | {"missing": NAME, "readTime": T}, …]`, one
//!   element per requested document, in any order.
//! - `runQuery`: `[{"document": DOC, "readTime": T, "done"?: true}, …]`; no match is
//!   `[{"readTime": T, …}]`.
//! - `commit`: `{"writeResults": [{"updateTime"?: T}, …], "commitTime": T}`, one result per
//!   write; a delete's result has no `updateTime`.
//! - `batchWrite`: `{"writeResults": [{"updateTime"?: T}, …], "status": [{"code"?: N}, …]}`.
//! - `beginTransaction`: `{"transaction": ID}` (base64); `rollback`: `{}`.
//! - DOC: `{"name": NAME, "fields"?: {…}, "createTime": T, "updateTime": T}` (`fields` is left
//!   out when the document has none).

use serde_json::{Map, Value};

use super::error::RestError;
use crate::firestore::timestamp::parse_timestamp_ms;

/// A document as an answer carried it: its name and version are checked, its fields are
/// Firestore typed values, read with [`Document::string`] and [`Document::integer`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Document {
    name: String,
    update_time: String,
    fields: Map<String, Value>,
}

impl Document {
    /// The full resource name (`projects/…/documents/locks/ID`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The version: what a `currentDocument.updateTime` precondition names.
    pub fn update_time(&self) -> &str {
        &self.update_time
    }

    /// Field `name` when it holds a `stringValue`.
    pub fn string(&self, name: &str) -> Option<&str> {
        string_of(self.fields.get(name)?)
    }

    /// Field `name` when it holds an `integerValue` (int64 travels as a decimal string; a
    /// JSON number is accepted too).
    pub fn integer(&self, name: &str) -> Option<i64> {
        integer_of(self.fields.get(name)?)
    }

    /// Whether field `name` is present, whatever it holds.
    pub fn has(&self, name: &str) -> bool {
        self.fields.contains_key(name)
    }

    /// Field `name` when it holds an `arrayValue`: its elements, typed values (an empty array
    /// travels without `values`).
    pub fn array(&self, name: &str) -> Option<&[Value]> {
        let array = self.fields.get(name)?.get("arrayValue")?.as_object()?;
        match array.get("values") {
            None => Some(&[]),
            Some(values) => values.as_array().map(Vec::as_slice),
        }
    }
}

/// A typed value's string, when it is a `stringValue`.
pub(crate) fn string_of(value: &Value) -> Option<&str> {
    value.get("stringValue")?.as_str()
}

/// A typed value's integer, when it is an `integerValue` (a decimal string, or a JSON number).
pub(crate) fn integer_of(value: &Value) -> Option<i64> {
    match value.get("integerValue")? {
        Value::String(text) => text.parse().ok(),
        Value::Number(number) => number.as_i64(),
        _ => None,
    }
}

/// A typed value's fields, when it is a `mapValue` with fields (an empty map travels without
/// `fields`, and reads as `None`: no map the backend writes is empty).
pub(crate) fn map_of(value: &Value) -> Option<&Map<String, Value>> {
    value.get("mapValue")?.get("fields")?.as_object()
}

impl Document {
    /// A document with `fields` (an object of typed values), as if read.
    #[cfg(test)]
    pub fn for_tests(name: &str, fields: Value) -> Document {
        let Value::Object(fields) = fields else {
            panic!("fields are an object");
        };
        Document {
            name: name.to_owned(),
            update_time: "2026-01-01T00:00:00Z".to_owned(),
            fields,
        }
    }

    fn decode(verb: &'static str, value: Value) -> Result<Document, RestError> {
        let Value::Object(mut map) = value else {
            return Err(RestError::bad_answer(verb, "a document is not an object"));
        };
        let name = match map.remove("name") {
            Some(Value::String(name)) if !name.is_empty() => name,
            _ => return Err(RestError::bad_answer(verb, "a document has no name")),
        };
        let update_time = match map.remove("updateTime") {
            Some(Value::String(time)) if parse_timestamp_ms(&time).is_some() => time,
            _ => {
                return Err(RestError::bad_answer(
                    verb,
                    format!("document {name} has no valid updateTime"),
                ));
            }
        };
        let fields = match map.remove("fields") {
            None => Map::new(),
            Some(Value::Object(fields)) => fields,
            Some(_) => {
                return Err(RestError::bad_answer(
                    verb,
                    format!("the fields of document {name} are not an object"),
                ));
            }
        };
        Ok(Document {
            name,
            update_time,
            fields,
        })
    }
}

/// The body of a successful answer to `verb` as JSON.
pub(crate) fn parse_body(verb: &'static str, text: &str) -> Result<Value, RestError> {
    if text.trim().is_empty() {
        return Err(RestError::bad_answer(verb, "the body is empty"));
    }
    // serde_json's message names a line and column, never the text.
    serde_json::from_str(text)
        .map_err(|e| RestError::bad_answer(verb, format!("the body is not JSON ({e})")))
}

/// The error an answer reports: an object with an `error` member, or an array with an
/// element that has one (a stream that failed part-way, after good elements or not).
fn reported_error(answer: &Value) -> Option<RestError> {
    let error = match answer {
        Value::Object(map) => map.get("error"),
        Value::Array(items) => items.iter().find_map(|item| item.get("error")),
        _ => None,
    }?;
    Some(RestError::from_error_element(error))
}

/// The elements of a streamed answer: a non-empty array of objects, none of them an error.
fn stream(verb: &'static str, answer: Value) -> Result<Vec<Map<String, Value>>, RestError> {
    if let Some(error) = reported_error(&answer) {
        return Err(error);
    }
    let Value::Array(items) = answer else {
        return Err(RestError::bad_answer(verb, "expected an array"));
    };
    if items.is_empty() {
        return Err(RestError::bad_answer(verb, "the array is empty"));
    }
    items
        .into_iter()
        .map(|item| match item {
            Value::Object(map) => Ok(map),
            _ => Err(RestError::bad_answer(verb, "an element is not an object")),
        })
        .collect()
}

/// A single (non-streamed) answer: an object that reports no error.
fn object(verb: &'static str, answer: Value) -> Result<Map<String, Value>, RestError> {
    if let Some(error) = reported_error(&answer) {
        return Err(error);
    }
    match answer {
        Value::Object(map) => Ok(map),
        _ => Err(RestError::bad_answer(verb, "expected an object")),
    }
}

/// A `batchGet` answer for the documents `names`: each one found (`Some`) or missing
/// (`None`), in the order asked. Every name must be answered exactly once, and nothing else.
pub(crate) fn batch_get(answer: Value, names: &[&str]) -> Result<Vec<Option<Document>>, RestError> {
    const VERB: &str = "batchGet";
    let mut answered: Vec<Option<Option<Document>>> = names.iter().map(|_| None).collect();
    for mut item in stream(VERB, answer)? {
        let (name, document) = match (item.remove("found"), item.remove("missing")) {
            (Some(found), None) => {
                let document = Document::decode(VERB, found)?;
                (document.name.clone(), Some(document))
            }
            (None, Some(Value::String(missing))) => (missing, None),
            _ => {
                return Err(RestError::bad_answer(
                    VERB,
                    "an element is neither one found document nor one missing name",
                ));
            }
        };
        let Some(slot) = names.iter().position(|asked| *asked == name) else {
            return Err(RestError::bad_answer(
                VERB,
                format!("document {name} was not asked for"),
            ));
        };
        if answered[slot].replace(document).is_some() {
            return Err(RestError::bad_answer(
                VERB,
                format!("document {name} is answered twice"),
            ));
        }
    }
    answered
        .into_iter()
        .zip(names)
        .map(|(answer, name)| {
            answer.ok_or_else(|| {
                RestError::bad_answer(
                    VERB,
                    format!("document {name} is neither found nor missing"),
                )
            })
        })
        .collect()
}

/// The documents a `runQuery` stream carries; empty when its elements carry only read times.
pub(crate) fn run_query(answer: Value) -> Result<Vec<Document>, RestError> {
    const VERB: &str = "runQuery";
    let mut documents = Vec::new();
    for mut item in stream(VERB, answer)? {
        match item.remove("document") {
            Some(document) => documents.push(Document::decode(VERB, document)?),
            None if item.get("readTime").is_some_and(Value::is_string) => {}
            None => {
                return Err(RestError::bad_answer(
                    VERB,
                    "an element carries neither a document nor a read time",
                ));
            }
        }
    }
    Ok(documents)
}

/// A `beginTransaction` answer: the transaction's id.
pub(crate) fn begin_transaction(answer: Value) -> Result<String, RestError> {
    const VERB: &str = "beginTransaction";
    match object(VERB, answer)?.remove("transaction") {
        Some(Value::String(id)) if !id.is_empty() => Ok(id),
        _ => Err(RestError::bad_answer(VERB, "no transaction id")),
    }
}

/// A `commit` answer for `writes`: each write's `updateTime`, which every `update` write must
/// have (it is the document's new version); `None` for deletes.
pub(crate) fn commit(answer: Value, writes: &[Value]) -> Result<Vec<Option<String>>, RestError> {
    const VERB: &str = "commit";
    let mut answer = object(VERB, answer)?;
    let commit_time = answer.get("commitTime").and_then(Value::as_str);
    if commit_time.and_then(parse_timestamp_ms).is_none() {
        return Err(RestError::bad_answer(VERB, "no valid commitTime"));
    }
    let results = write_results(VERB, answer.remove("writeResults"), writes.len())?;
    results
        .into_iter()
        .zip(writes)
        .map(|(time, write)| match time {
            None if write.get("update").is_some() => Err(RestError::bad_answer(
                VERB,
                "an update's write result has no updateTime",
            )),
            time => Ok(time),
        })
        .collect()
}

/// A `batchWrite` answer for `count` updates: each one's new `updateTime`, or why it failed
/// (its status).
pub(crate) fn batch_write(
    answer: Value,
    count: usize,
) -> Result<Vec<Result<String, RestError>>, RestError> {
    const VERB: &str = "batchWrite";
    let mut answer = object(VERB, answer)?;
    let times = write_results(VERB, answer.remove("writeResults"), count)?;
    let statuses = match answer.remove("status") {
        Some(Value::Array(statuses)) if statuses.len() == count => statuses,
        _ => {
            return Err(RestError::bad_answer(
                VERB,
                format!("expected {count} write statuses"),
            ));
        }
    };
    times
        .into_iter()
        .zip(statuses)
        .map(|(time, status)| {
            let code = match status.get("code") {
                None => 0,
                Some(code) => code.as_i64().ok_or_else(|| {
                    RestError::bad_answer(VERB, "a write status code is not a number")
                })?,
            };
            if code != 0 {
                return Ok(Err(RestError::from_write_status(200, &status)
                    .unwrap_or_else(|| {
                        RestError::bad_answer(VERB, "a write status is unclear")
                    })));
            }
            time.map(Ok)
                .ok_or_else(|| RestError::bad_answer(VERB, "a successful update has no updateTime"))
        })
        .collect()
}

/// `writeResults`: `count` objects, each with an optional valid `updateTime`.
fn write_results(
    verb: &'static str,
    results: Option<Value>,
    count: usize,
) -> Result<Vec<Option<String>>, RestError> {
    let results = match results {
        Some(Value::Array(results)) if results.len() == count => results,
        _ => {
            return Err(RestError::bad_answer(
                verb,
                format!("expected {count} write results"),
            ));
        }
    };
    results
        .into_iter()
        .map(|result| match result {
            Value::Object(mut result) => match result.remove("updateTime") {
                None => Ok(None),
                Some(Value::String(time)) if parse_timestamp_ms(&time).is_some() => Ok(Some(time)),
                Some(_) => Err(RestError::bad_answer(
                    verb,
                    "an updateTime is not a timestamp",
                )),
            },
            _ => Err(RestError::bad_answer(
                verb,
                "a write result is not an object",
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::error::ErrorCode;

    const PLACE: &str = "Firestore at 127.0.0.1:8080 (project p, database (default))";
    const T: &str = "2026-11-23T12:57:21.600765Z";
    const A: &str = "projects/p/databases/(default)/documents/locks/a";
    const B: &str = "projects/p/databases/(default)/documents/fence_counters/b";

    fn doc(name: &str) -> Value {
        json!({
            "name": name,
            "fields": { "lockId": { "stringValue": "x" }, "n": { "integerValue": "7" } },
            "createTime": T,
            "updateTime": T,
        })
    }

    /// The code and message of a decoding failure.
    fn failure<T: std::fmt::Debug>(decoded: Result<T, RestError>) -> (ErrorCode, String) {
        let err = decoded.expect_err("must not decode").into_lock_error(PLACE);
        (err.code(), err.message().to_owned())
    }

    fn unavailable() -> Value {
        json!({ "error": { "code": 14, "status": "UNAVAILABLE", "message": "x" } })
    }

    #[test]
    fn batch_get_answers_each_name_in_order() {
        let answer = json!([
            { "missing": B, "readTime": T },
            { "found": doc(A), "readTime": T },
        ]);
        let [a, b]: [_; 2] = batch_get(answer, &[A, B]).unwrap().try_into().unwrap();
        let a = a.expect("found");
        assert_eq!((a.name(), a.update_time()), (A, T));
        assert_eq!((a.string("lockId"), a.integer("n")), (Some("x"), Some(7)));
        assert_eq!((a.string("n"), a.integer("lockId")), (None, None));
        assert_eq!(b, None);
        // A document without fields has none.
        let bare = json!([{ "found": { "name": A, "updateTime": T }, "readTime": T }]);
        let [bare]: [_; 1] = batch_get(bare, &[A]).unwrap().try_into().unwrap();
        assert_eq!(bare.unwrap().string("lockId"), None);
    }

    #[test]
    fn run_query_answers_documents_or_a_positive_no_match() {
        let none = json!([{ "readTime": T, "done": true }]);
        assert_eq!(run_query(none).unwrap(), vec![]);
        let one = json!([{ "document": doc(A), "readTime": T, "done": true }]);
        assert_eq!(run_query(one).unwrap()[0].name(), A);
        let two =
            json!([{ "document": doc(A), "readTime": T }, { "document": doc(B), "readTime": T }]);
        assert_eq!(run_query(two).unwrap().len(), 2);
    }

    #[test]
    fn a_transaction_begun_answers_its_id_and_nothing_else_is_one() {
        let id = begin_transaction(json!({ "transaction": "EQYAAAAAAAAA" })).unwrap();
        assert_eq!(id, "EQYAAAAAAAAA");
        for answer in [json!({}), json!({ "transaction": "" }), json!([])] {
            assert!(
                matches!(
                    begin_transaction(answer.clone()),
                    Err(RestError::BadAnswer { .. })
                ),
                "{answer}"
            );
        }
    }

    #[test]
    fn commits_and_batch_writes_answer_versions() {
        let update = json!({ "update": { "name": A } });
        let delete = json!({ "delete": A });
        let answer = json!({ "writeResults": [{ "updateTime": T }, {}], "commitTime": T });
        assert_eq!(
            commit(answer, &[update, delete]).unwrap(),
            vec![Some(T.to_owned()), None]
        );
        let answer = json!({
            "writeResults": [{ "updateTime": T }, {}],
            "status": [{}, { "code": 5, "message": "no entity to update" }],
        });
        let results = batch_write(answer, 2).unwrap();
        assert_eq!(results[0].as_ref().unwrap(), T);
        assert!(results[1].as_ref().unwrap_err().is_precondition_failure());
    }

    /// Every error element, wherever it sits, is that error with its status's code.
    #[test]
    fn error_elements_are_their_errors() {
        let cases = [
            (unavailable(), ErrorCode::ServiceUnavailable),
            (
                json!({ "error": { "status": "PERMISSION_DENIED", "message": "no" } }),
                ErrorCode::AuthFailed,
            ),
            (
                json!({ "error": { "code": 3, "message": "bad" } }),
                ErrorCode::InvalidArgument,
            ),
            (
                json!({ "error": { "code": 4, "message": "slow" } }),
                ErrorCode::NetworkTimeout,
            ),
            (json!({ "error": {} }), ErrorCode::Internal),
        ];
        for (element, code) in cases {
            let streams = [
                json!([element]),
                json!([{ "document": doc(A), "readTime": T }, element]),
                json!([{ "found": doc(A), "readTime": T }, element]),
            ];
            for answer in streams {
                assert_eq!(failure(run_query(answer.clone())).0, code, "{answer}");
                assert_eq!(failure(batch_get(answer.clone(), &[A])).0, code, "{answer}");
            }
            assert_eq!(failure(commit(element.clone(), &[])).0, code, "{element}");
            assert_eq!(failure(batch_write(json!([element]), 1)).0, code);
        }
        let (_, message) = failure(run_query(json!([unavailable()])));
        assert_eq!(message, format!("{PLACE} answered HTTP 200 UNAVAILABLE: x"));
        assert!(
            RestError::from_error_element(&json!({ "status": "ABORTED" })).is_aborted(),
            "a conflict in a stream is retried like any other"
        );
    }

    /// Each answer of the wrong shape, per call: a transient `ServiceUnavailable` naming the
    /// call and what is wrong, never "no document".
    #[test]
    fn wrong_shapes_are_bad_answers() {
        let no_update_time = json!({ "name": A, "fields": {} });
        let reads = [
            (json!({}), "expected an array"),
            (json!([]), "the array is empty"),
            (json!("text"), "expected an array"),
            (json!([1]), "an element is not an object"),
            (
                json!([{ "document": no_update_time }]),
                "has no valid updateTime",
            ),
            (
                json!([{ "document": { "updateTime": T } }]),
                "a document has no name",
            ),
            (
                json!([{ "document": { "name": A, "updateTime": "yesterday" } }]),
                "has no valid updateTime",
            ),
            (
                json!([{ "document": { "name": A, "updateTime": T, "fields": [] } }]),
                "are not an object",
            ),
            (json!([{}]), "neither a document nor a read time"),
        ];
        for (answer, what) in reads {
            let (code, message) = failure(run_query(answer.clone()));
            assert_eq!(code, ErrorCode::ServiceUnavailable, "{answer}");
            assert!(
                message.starts_with(&format!("{PLACE} answered runQuery with something")),
                "{message}"
            );
            assert!(
                message.ends_with(what) || message.contains(what),
                "{message}"
            );
        }
        let gets = [
            (json!({}), "expected an array"),
            (
                json!([{ "readTime": T }]),
                "neither one found document nor one missing",
            ),
            (
                json!([{ "found": doc(A), "missing": A }]),
                "neither one found",
            ),
            (json!([{ "missing": 7 }]), "neither one found"),
            (json!([{ "missing": B }]), "was not asked for"),
            (
                json!([{ "missing": A }, { "found": doc(A) }]),
                "is answered twice",
            ),
            (
                json!([{ "found": { "name": A } }]),
                "has no valid updateTime",
            ),
        ];
        for (answer, what) in gets {
            let (code, message) = failure(batch_get(answer.clone(), &[A]));
            assert_eq!(code, ErrorCode::ServiceUnavailable, "{answer}");
            assert!(message.contains(what), "{answer}: {message}");
        }
        let (_, message) = failure(batch_get(json!([{ "missing": A }]), &[A, B]));
        assert!(message.ends_with(&format!("document {B} is neither found nor missing")));

        let update = [json!({ "update": { "name": A } })];
        let commits = [
            (json!({}), "no valid commitTime"),
            (json!([]), "expected an object"),
            (
                json!({ "writeResults": [{ "updateTime": T }] }),
                "no valid commitTime",
            ),
            (json!({ "commitTime": T }), "expected 1 write results"),
            (
                json!({ "commitTime": T, "writeResults": [] }),
                "expected 1 write results",
            ),
            (
                json!({ "commitTime": T, "writeResults": [{}] }),
                "an update's write result has no updateTime",
            ),
            (
                json!({ "commitTime": T, "writeResults": [{ "updateTime": 5 }] }),
                "not a timestamp",
            ),
            (
                json!({ "commitTime": T, "writeResults": [7] }),
                "not an object",
            ),
        ];
        for (answer, what) in commits {
            let (code, message) = failure(commit(answer.clone(), &update));
            assert_eq!(code, ErrorCode::ServiceUnavailable, "{answer}");
            assert!(message.ends_with(what), "{answer}: {message}");
        }
        let batch_writes = [
            (json!({}), "expected 1 write results"),
            (
                json!({ "writeResults": [{ "updateTime": T }] }),
                "expected 1 write statuses",
            ),
            (
                json!({ "writeResults": [{}], "status": [{}] }),
                "a successful update has no updateTime",
            ),
            (
                json!({ "writeResults": [{}], "status": [{ "code": "9" }] }),
                "not a number",
            ),
        ];
        for (answer, what) in batch_writes {
            let (code, message) = failure(batch_write(answer.clone(), 1));
            assert_eq!(code, ErrorCode::ServiceUnavailable, "{answer}");
            assert!(message.ends_with(what), "{answer}: {message}");
        }
    }

    #[test]
    fn bodies_that_are_not_json_are_bad_answers() {
        for (body, what) in [
            ("", "the body is empty"),
            ("  \n", "the body is empty"),
            (
                "not json",
                "the body is not JSON (expected ident at line 1 column 2)",
            ),
            ("[{\"readTime\": ", "the body is not JSON"),
        ] {
            let (code, message) = failure(parse_body("runQuery", body));
            assert_eq!(code, ErrorCode::ServiceUnavailable, "{body:?}");
            assert!(message.contains(what), "{body:?}: {message}");
            assert!(!message.contains("readTime"), "never quotes the body");
        }
        assert_eq!(parse_body("commit", "{}").unwrap(), json!({}));
    }
}
