//! A key's line of waiters ([`Places`], DESIGN §12) as fields of a Firestore document: a lock's
//! line in the key's fence counter document, a semaphore's in the semaphore's document. The
//! rule itself is [`Places::admit`]; this file only reads and writes it.
//!
//! Fields: `lineTicket` (integer, the last ticket issued: it never shrinks while the document
//! lives) and `line` (array, in line order — by ticket, then place id — of maps `placeId`
//! (string), `ticket` and `expiresAtMs` (integers), `holder` (string) when the waiter described
//! itself, and `shared` (boolean `true`) when it waits for a shared hold). A document whose
//! line was never used has neither field, so an acquisition that finds nobody waiting writes
//! its document exactly as before the line existed.
//!
//! Why in those documents: every acquisition already reads them and commits them with an
//! `updateTime` precondition, so the line is read in the same request and checked by the same
//! commit, with no write of its own; and a lock holder's release and renewals never touch the
//! counter document, so a waiter's place never races them.

use serde_json::{Map, Value};

use super::rest::{
    Document, array_value, integer_of, integer_value, map_of, map_value, string_of, string_value,
};
use crate::driver::{PlaceRecord, Places};
use crate::error::{LockError, Result};

/// As for lock documents: the largest integer a JavaScript number holds exactly.
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// The line stored in `document` (empty when there is no document or it has no line), or why
/// it is not a SyncGuard line: `Internal`, naming `key`, as for every document that is not
/// ours (`what` names the document: "fence counter", "semaphore"). Places are returned in
/// line order (ticket, then place id).
pub(super) fn parse_line(document: Option<&Document>, key: &str, what: &str) -> Result<Places> {
    let Some(document) = document else {
        return Ok(Places::default());
    };
    let not_a_line = |problem: &str| {
        LockError::internal(format!(
            "a Firestore {what} document's line is not a SyncGuard line: {problem}"
        ))
        .with_key(key)
    };
    let places = document.array("line");
    let Some(last_ticket) = document.integer("lineTicket") else {
        if places.is_some() {
            return Err(not_a_line("`line` without an integer `lineTicket`"));
        }
        return Ok(Places::default());
    };
    let last_ticket = u64::try_from(last_ticket)
        .ok()
        .filter(|_| last_ticket <= MAX_SAFE_INTEGER)
        .ok_or_else(|| not_a_line("`lineTicket` is not an integer from 0 to 2^53 - 1"))?;
    let mut places = places
        .unwrap_or_default()
        .iter()
        .map(|value| map_of(value).and_then(parse_place))
        .collect::<Option<Vec<PlaceRecord>>>()
        .ok_or_else(|| {
            not_a_line(
                "a place is not a map of `placeId`, `ticket` (an integer from 1) and \
                 `expiresAtMs` (an integer from 0 to 2^53 - 1)",
            )
        })?;
    if places.iter().any(|place| place.ticket > last_ticket) {
        return Err(not_a_line("a place's ticket is above `lineTicket`"));
    }
    // Written in line order; sorted again so that a hand-edited document cannot reorder the
    // line. A ticket may be shared (waiters of several keys each carry theirs to every key of
    // their set): the place id decides, as in `Places`.
    places.sort_by(|a, b| (a.ticket, &a.place_id).cmp(&(b.ticket, &b.place_id)));
    Ok(Places {
        last_ticket,
        places,
    })
}

fn parse_place(fields: &Map<String, Value>) -> Option<PlaceRecord> {
    let integer = |field: &str| {
        fields
            .get(field)
            .and_then(integer_of)
            .filter(|n| (0..=MAX_SAFE_INTEGER).contains(n))
    };
    Some(PlaceRecord {
        place_id: fields
            .get("placeId")
            .and_then(string_of)
            .filter(|id| !id.is_empty())?
            .to_owned(),
        ticket: u64::try_from(integer("ticket")?).ok().filter(|t| *t > 0)?,
        expires_at_ms: integer("expiresAtMs")?,
        holder: fields.get("holder").and_then(string_of).map(str::to_owned),
        // Absent in lines written before shared holds: an exclusive waiter.
        shared: match fields.get("shared") {
            None => false,
            Some(value) => value.get("booleanValue")?.as_bool()?,
        },
    })
}

/// Adds the line's fields to `fields` (a document's typed fields), unless the line was never
/// used (no ticket issued): then the document is written as without a line.
pub(super) fn add_line_fields(line: &Places, fields: &mut Map<String, Value>) {
    if line.last_ticket == 0 && line.is_empty() {
        return;
    }
    let places = line.places.iter().map(place_value).collect();
    fields.insert(
        "lineTicket".to_owned(),
        integer_value(ticket(line.last_ticket)),
    );
    fields.insert("line".to_owned(), array_value(places));
}

fn place_value(place: &PlaceRecord) -> Value {
    let mut fields = Map::new();
    fields.insert("placeId".to_owned(), string_value(&place.place_id));
    fields.insert("ticket".to_owned(), integer_value(ticket(place.ticket)));
    fields.insert("expiresAtMs".to_owned(), integer_value(place.expires_at_ms));
    if let Some(holder) = &place.holder {
        fields.insert("holder".to_owned(), string_value(holder));
    }
    if place.shared {
        fields.insert(
            "shared".to_owned(),
            serde_json::json!({ "booleanValue": true }),
        );
    }
    map_value(Value::Object(fields))
}

/// A ticket as stored: tickets count waiters' arrivals and never come near `i64::MAX`.
fn ticket(ticket: u64) -> i64 {
    i64::try_from(ticket).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::driver::{Holder, Line, LockId};

    fn document(fields: Map<String, Value>) -> Document {
        Document::for_tests("projects/p/x/k", Value::Object(fields))
    }

    #[test]
    fn a_line_reads_back_and_an_unused_one_writes_nothing() {
        let mut fields = Map::new();
        add_line_fields(&Places::default(), &mut fields);
        assert!(fields.is_empty(), "no line, no fields");
        assert_eq!(
            parse_line(Some(&document(fields)), "k", "test").unwrap(),
            Places::default()
        );

        let mut line = Places::default();
        let holder = Holder::new("worker 1").unwrap();
        for (holder, shared) in [(None, false), (Some(&holder), true)] {
            let place = LockId::generate();
            let _ = line.admit(Line::Wait(&place), 0, shared, 1_000, holder);
        }
        assert!(line.places[1].shared);
        let mut fields = Map::new();
        add_line_fields(&line, &mut fields);
        assert_eq!(
            parse_line(Some(&document(fields)), "k", "test").unwrap(),
            line
        );

        // Every place gone, the ticket stays.
        line.places.clear();
        let mut fields = Map::new();
        add_line_fields(&line, &mut fields);
        assert_eq!(fields["lineTicket"], integer_value(2));
        assert_eq!(
            parse_line(Some(&document(fields)), "k", "test").unwrap(),
            line
        );
    }

    #[test]
    fn places_read_back_in_ticket_then_place_id_order() {
        let place = |id: &str, ticket: u64| PlaceRecord {
            place_id: id.to_owned(),
            ticket,
            expires_at_ms: 5,
            holder: None,
            shared: false,
        };
        let stored = Places {
            last_ticket: 5,
            places: vec![place("b", 5), place("c", 4), place("a", 5)],
        };
        let mut fields = Map::new();
        add_line_fields(&stored, &mut fields);
        let read = parse_line(Some(&document(fields)), "k", "test").unwrap();
        let order: Vec<(u64, &str)> = read
            .places
            .iter()
            .map(|p| (p.ticket, p.place_id.as_str()))
            .collect();
        assert_eq!(order, [(4, "c"), (5, "a"), (5, "b")]);
    }

    #[test]
    fn a_line_that_is_not_ours_is_an_error_naming_the_key() {
        let place = json!({ "mapValue": { "fields": {
            "placeId": { "stringValue": "p" },
            "ticket": { "integerValue": "1" },
            "expiresAtMs": { "integerValue": "5" },
        }}});
        let broken = [
            json!({ "line": { "arrayValue": { "values": [place] } } }),
            json!({ "lineTicket": { "stringValue": "1" }, "line": { "arrayValue": {} } }),
            json!({ "lineTicket": { "integerValue": "-1" } }),
            json!({ "lineTicket": { "integerValue": "0" }, "line": { "arrayValue": { "values": [place] } } }),
            json!({ "lineTicket": { "integerValue": "1" }, "line": { "arrayValue": { "values": [{ "mapValue": { "fields": { "placeId": { "stringValue": "p" } } } }] } } }),
        ];
        for fields in broken {
            let Value::Object(fields) = fields else {
                unreachable!()
            };
            let error = parse_line(Some(&document(fields.clone())), "k", "test").unwrap_err();
            assert_eq!(error.code(), crate::ErrorCode::Internal, "{fields:?}");
            assert_eq!(error.key(), Some("k"));
        }
    }
}
