//! The Redis backend. Not implemented yet: this module only reserves the `redis` feature, and
//! [`connect`](crate::connect) reports `redis` URLs as unsupported in this version.
