//! Durations on the command line: the crate's one parser (`src/duration.rs`), compiled into the
//! binary, which cannot reach a crate-private function of the library.

#[path = "../../duration.rs"]
mod parser;

pub(crate) use parser::parse_duration;
