//! The PostgreSQL backend. Not implemented yet: this module only reserves the `postgres` feature, and
//! [`connect`](crate::connect) reports `postgres` URLs as unsupported in this version.
