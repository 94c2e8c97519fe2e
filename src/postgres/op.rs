//! One operation as the backend sends it: its statement, sent inline, and the server function
//! that does the same ([`Op`]), with the DDL that installs the function and the fingerprint
//! that tells it from any other.
//!
//! # Server functions
//!
//! Each operation is also installed by `setup_schema` as a PL/pgSQL function, named after the
//! lock table and the operation (`syncguard_locks_acquire_v8`, …). Calling it is one statement,
//! one transaction, as the statement is — but planned in microseconds: PL/pgSQL keeps its
//! statements' plans for the life of the server connection, which survives behind a
//! transaction-mode pooler where a client's prepared statements cannot. Sent inline, the acquire
//! statement spends more time being parsed and planned than running. Without the functions
//! (tables created by an older syncguard or by the TypeScript SyncGuard) the statements are sent
//! inline. The version suffix changes whenever a statement or function does, so an old function
//! is never called for a new statement.
//!
//! Most functions run their statement as it is (`RETURN QUERY <statement>`). The two that every
//! lock cycle runs, acquire and release, take the statement's steps one by one instead and answer
//! one row of `OUT` parameters (`Op::steps`): the same writes under the same locks, but each step
//! a small cached plan and no result set to build. Measured against the statement form they cost
//! the server about a tenth less CPU per cycle (docs/benchmarks.md). The steps keep the
//! statement's guarantees: acquire takes the advisory lock first and each later statement of the
//! function reads a fresh snapshot (READ COMMITTED, volatile function), so it sees every lock
//! committed while it waited; the lock row's `ON CONFLICT … WHERE <expired>` still decides; a
//! row that is not a SyncGuard record stops it before the fence counter is touched; a fence
//! counter no fence can follow stops it before the lock row is written. Release deletes by lock
//! id with the record check, then announces the release; when nothing was deleted it answers a
//! row of NULLs (the statement: no row), or the key of a row that is not a SyncGuard record.
//!

use std::sync::Arc;

use postgres::types::Type;
use sha2::{Digest, Sha256};

use super::tables::TableNames;

/// One statement: its text and its parameter types, sent together as an unnamed statement
/// (one round trip; nothing is left prepared on the server, which poolers require).
#[derive(Clone)]
pub(crate) struct Sql {
    pub text: Arc<str>,
    pub types: &'static [Type],
}

/// One operation: its statement, and the server function that does the same.
pub(crate) struct Op {
    /// The statement itself.
    pub inline: Sql,
    /// `SELECT * FROM <function>($1, …)`.
    pub call: Sql,
    /// The function's name (a validated identifier).
    pub function: String,
    /// What the function answers: its `OUT` parameters or the columns of its table.
    outputs: Outputs,
    /// The function's PL/pgSQL source, as the server keeps it (`pg_proc.prosrc`).
    source: String,
}

/// What a server function answers.
enum Outputs {
    /// `RETURNS TABLE (<columns>)`.
    Table(String),
    /// `OUT name type, …` parameters after the inputs: one row.
    Params(String),
}

impl Op {
    /// An operation whose function runs the statement itself (`RETURN QUERY <statement>`).
    pub fn query(
        tables: &TableNames,
        name: &str,
        types: &'static [Type],
        returns: &str,
        text: String,
    ) -> Op {
        Op::query_in_function(tables, name, types, returns, text.clone(), text)
    }

    /// An operation whose function runs `in_function`, a statement with the same parameters
    /// and result columns as the one sent inline, `text` (the lookups: only the function,
    /// which `setup` installs with the `holder` column, reads that column).
    pub fn query_in_function(
        tables: &TableNames,
        name: &str,
        types: &'static [Type],
        returns: &str,
        text: String,
        in_function: String,
    ) -> Op {
        let source = plpgsql(&format!("BEGIN\n  RETURN QUERY {in_function};\nEND"));
        Op::new(
            tables,
            name,
            types,
            text,
            Outputs::Table(returns.to_owned()),
            source,
        )
    }

    /// An operation whose function takes the statement's steps one by one (`body`, PL/pgSQL
    /// after `#variable_conflict use_column`), answering one row of `OUT` parameters (`outs`,
    /// as `OUT name type, …`) with the statement's result columns.
    pub fn steps(
        tables: &TableNames,
        name: &str,
        types: &'static [Type],
        outs: &str,
        text: String,
        body: String,
    ) -> Op {
        Op::new(
            tables,
            name,
            types,
            text,
            Outputs::Params(outs.to_owned()),
            plpgsql(&body),
        )
    }

    /// The same operation, existing only as its server function (written with no statement
    /// to send inline): nothing correct can be sent inline (see `permit_sql.rs`), so its
    /// `inline` form is the call itself, and without the function the call fails
    /// with the `InvalidArgument` refusal that says to run `syncguard setup`.
    pub fn function_only(mut self) -> Op {
        self.inline = self.call.clone();
        self
    }

    fn new(
        tables: &TableNames,
        name: &str,
        types: &'static [Type],
        text: String,
        outputs: Outputs,
        source: String,
    ) -> Op {
        // A lock table name has at most 51 bytes and an operation's name at most 8, so this
        // stays within PostgreSQL's 63 (tests::function_names_fit).
        let function = format!("{}_{name}_{FUNCTION_VERSION}", tables.lock_table());
        let args: Vec<String> = (1..=types.len()).map(|n| format!("${n}")).collect();
        Op {
            call: Sql {
                text: format!("SELECT * FROM {function}({})", args.join(", ")).into(),
                types,
            },
            inline: Sql {
                text: text.into(),
                types,
            },
            function,
            outputs,
            source,
        }
    }

    /// The same operation, whose statement sent inline takes only the first `count` of the
    /// function's parameters: the function takes more (acquire's holder, which the statement
    /// — sent on tables that may lack the `holder` column — never names).
    pub fn inline_takes_first(mut self, count: usize) -> Op {
        self.inline.types = &self.inline.types[..count.min(self.inline.types.len())];
        self
    }

    /// `CREATE OR REPLACE FUNCTION …` for this operation.
    pub fn function_ddl(&self) -> String {
        let result = match &self.outputs {
            Outputs::Table(columns) => format!(") RETURNS TABLE ({columns})"),
            Outputs::Params(outs) => format!(",\n  {outs})"),
        };
        format!(
            "CREATE OR REPLACE FUNCTION {}({}{result}\nLANGUAGE plpgsql AS $syncguard${}$syncguard$;\n",
            self.function,
            self.parameter_types(),
            self.source
        )
    }

    /// The function's parameters and result as the server prints them
    /// (`pg_get_function_arguments`, ` -> `, `pg_get_function_result`): what `CREATE OR
    /// REPLACE` cannot change, so a function of the same signature that differs here must be
    /// dropped before it is created again.
    pub fn shape(&self) -> String {
        let words = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
        let (arguments, result) = match &self.outputs {
            Outputs::Table(columns) => {
                (self.parameter_types(), format!("TABLE({})", words(columns)))
            }
            Outputs::Params(outs) => {
                // One OUT parameter makes the function return its type; several, a record.
                let single = (!outs.contains(','))
                    .then(|| outs.split_whitespace().last())
                    .flatten();
                (
                    format!("{}, {}", self.parameter_types(), words(outs)),
                    single.unwrap_or("record").to_owned(),
                )
            }
        };
        format!("{arguments} -> {result}")
    }

    /// What tells this function from any other of its signature: SHA-256 (hex) of its
    /// language, [`shape`](Op::shape) and source, as [`SERVER_FINGERPRINT`] computes it from the
    /// catalog.
    pub fn fingerprint(&self) -> String {
        let digest = Sha256::digest(format!("plpgsql\n{}\n{}", self.shape(), self.source));
        digest.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    /// The function's name and parameter types, as `to_regprocedure` reads them.
    pub fn signature(&self) -> String {
        format!("{}({})", self.function, self.parameter_types())
    }

    fn parameter_types(&self) -> String {
        let types: Vec<&str> = self
            .call
            .types
            .iter()
            .map(|t| match *t {
                Type::INT8 => "bigint",
                Type::INT8_ARRAY => "bigint[]",
                Type::TEXT_ARRAY => "text[]",
                _ => "text",
            })
            .collect();
        types.join(", ")
    }
}

/// A PL/pgSQL function's source around `body`. `use_column`: the result columns share names
/// with table columns, and the statements mean the table's.
fn plpgsql(body: &str) -> String {
    format!("\n#variable_conflict use_column\n{body}\n")
}

/// The server's side of [`Op::fingerprint`], for the function `pg_proc` row `p`: SHA-256 (hex)
/// of its language, parameters, result and source. Computed from the catalog, so a function
/// replaced behind syncguard's back (another body under the same name and signature) no
/// longer matches, whatever comment or name it kept.
pub(crate) const SERVER_FINGERPRINT: &str = "encode(sha256(convert_to(\
     (SELECT l.lanname FROM pg_language l WHERE l.oid = p.prolang) || E'\\n' \
     || pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) \
     || E'\\n' || p.prosrc, 'UTF8')), 'hex')";

/// The server's side of [`Op::shape`], for the function `pg_proc` row `p`.
pub(crate) const SERVER_SHAPE: &str =
    "pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid)";

/// Part of every function's name; bump it whenever a statement or its parameters change.
const FUNCTION_VERSION: &str = "v8";
