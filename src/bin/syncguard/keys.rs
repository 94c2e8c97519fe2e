//! The keys a command names with `--key`, which may repeat on `acquire` and `run`: one key (or
//! one given several times) is the command as it always was; several are held together through
//! `Locker::lock_all` (DESIGN §12, "Several keys"), the exclusive locks only.
//!
//! Checked before any backend is reached, with the library's own checks (`KeySet`): 1 to 64
//! distinct keys, each valid. Several keys are listed one per line (`run`'s environment), so a
//! key with a newline in it cannot be one of several.

use syncguard::LockError;
use syncguard::driver::KeySet;

use crate::input;

/// The keys of a command, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keys {
    /// One key, as given (the only form `--permits` and `--shared` take).
    One(String),
    /// 2 to 64 distinct keys: NFC, in byte order (`MultiLockGuard::keys`' order).
    Several(Vec<String>),
}

impl Keys {
    /// `--key`'s values for a command holding them `exclusive`ly (else `--permits` or
    /// `--shared`): `InvalidArgument` for a bad key, more than 64 distinct ones, several not
    /// held exclusively, or a newline in one of several.
    pub fn of(given: &[String], exclusive: bool) -> syncguard::Result<Keys> {
        for key in given {
            input::key(key)?;
        }
        let set = KeySet::new(given).map_err(|error| input::named("--key", &error))?;
        if set.len() == 1 {
            return given
                .first()
                .map(|key| Keys::One(key.clone()))
                .ok_or_else(|| LockError::invalid_argument("--key: no key given"));
        }
        if !exclusive {
            return Err(LockError::invalid_argument(
                "--key may repeat only for exclusive locks: --permits and --shared take one key \
                 (several keys are not supported with them in this version)",
            ));
        }
        let keys: Vec<String> = set.iter().map(|key| key.as_str().to_owned()).collect();
        if keys.iter().any(|key| key.contains('\n')) {
            return Err(LockError::invalid_argument(
                "--key: a key with a newline cannot be one of several (their keys and fences \
                 are listed one per line)",
            ));
        }
        Ok(Keys::Several(keys))
    }

    /// The keys: the one as given, or the several in their order.
    pub fn as_slice(&self) -> &[String] {
        match self {
            Keys::One(key) => std::slice::from_ref(key),
            Keys::Several(keys) => keys,
        }
    }

    /// The keys for a message: `"a"`, or `"a", "b"`.
    pub fn quoted(&self) -> String {
        let quoted: Vec<String> = self
            .as_slice()
            .iter()
            .map(|key| format!("{key:?}"))
            .collect();
        quoted.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncguard::ErrorCode;

    fn keys(given: &[&str]) -> Vec<String> {
        given.iter().map(|key| (*key).to_owned()).collect()
    }

    #[test]
    fn one_key_is_kept_as_given_and_several_are_sorted_and_collapsed() {
        assert_eq!(
            Keys::of(&keys(&["e\u{301}"]), false).ok(),
            Some(Keys::One("e\u{301}".to_owned()))
        );
        assert_eq!(
            Keys::of(&keys(&["a", "a"]), false).ok(),
            Some(Keys::One("a".to_owned()))
        );
        assert_eq!(
            Keys::of(&keys(&["b", "a", "é", "e\u{301}", "b"]), true).ok(),
            Some(Keys::Several(keys(&["a", "b", "é"])))
        );
    }

    #[test]
    fn bad_sets_are_bad_usage() {
        let too_many: Vec<String> = (0..65).map(|n| format!("k{n}")).collect();
        for (given, exclusive) in [
            (keys(&["a", "b"]), false),
            (keys(&["a", "b\nc"]), true),
            (keys(&["a", ""]), true),
            (too_many, true),
        ] {
            let refused = Keys::of(&given, exclusive).unwrap_err();
            assert_eq!(refused.code(), ErrorCode::InvalidArgument, "{given:?}");
        }
        // One key with a newline is today's key: it is never listed.
        assert!(Keys::of(&keys(&["a\nb"]), true).is_ok());
    }
}
