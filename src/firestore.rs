//! The Firestore backend. Not implemented yet: this module only reserves the `firestore` feature, and
//! [`connect`](crate::connect) reports `firestore` URLs as unsupported in this version.
