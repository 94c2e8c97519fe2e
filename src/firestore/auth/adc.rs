//! Application Default Credentials: where [`Credentials::Default`](super::Credentials::Default)
//! finds credentials, in the order Google's client libraries use:
//!
//! 1. the file `GOOGLE_APPLICATION_CREDENTIALS` names (set and non-empty: it must then be
//!    readable and valid, there is no falling through);
//! 2. gcloud's well-known file, `application_default_credentials.json` in
//!    `$CLOUDSDK_CONFIG`, else `$HOME/.config/gcloud` (`%APPDATA%\gcloud` on Windows), when it
//!    exists;
//! 3. the metadata server (`GCE_METADATA_HOST`, else `metadata.google.internal`).
//!
//! The environment is a parameter, so the order is tested without touching the process's.

use std::ffi::OsString;
use std::path::PathBuf;

use super::cache::Cached;
use super::http::Http;
use super::json::{Loaded, load_file};
use super::metadata::MetadataSource;
use super::source::Env;
use crate::error::Result;

/// The well-known file's name in gcloud's configuration directory.
const WELL_KNOWN_FILE: &str = "application_default_credentials.json";

/// Where the default credentials are.
#[derive(Debug, PartialEq)]
pub(super) enum Found {
    /// The file `GOOGLE_APPLICATION_CREDENTIALS` names.
    EnvironmentFile(PathBuf),
    /// gcloud's well-known file, which exists.
    WellKnownFile(PathBuf),
    /// Neither: the metadata server.
    MetadataServer,
}

/// Finds the default credentials in `env` (and the file system, for the well-known file);
/// `windows` chooses where gcloud keeps its configuration.
pub(super) fn find(env: Env<'_>, windows: bool) -> Found {
    // Google's libraries treat an empty value as unset.
    if let Some(path) = non_empty(env, "GOOGLE_APPLICATION_CREDENTIALS") {
        return Found::EnvironmentFile(PathBuf::from(path));
    }
    match well_known_file(env, windows) {
        Some(path) if path.is_file() => Found::WellKnownFile(path),
        _ => Found::MetadataServer,
    }
}

/// Where gcloud writes `application_default_credentials.json`, whether or not it is there:
/// `$CLOUDSDK_CONFIG`, else `$HOME/.config/gcloud`, or on Windows `%APPDATA%\gcloud` (else
/// `%SystemDrive%\gcloud`, as Google's libraries do). `None` without a home directory.
pub(super) fn well_known_file(env: Env<'_>, windows: bool) -> Option<PathBuf> {
    let directory = match non_empty(env, "CLOUDSDK_CONFIG") {
        Some(directory) => PathBuf::from(directory),
        None if windows => {
            let root = non_empty(env, "APPDATA")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    let mut drive = non_empty(env, "SystemDrive").unwrap_or_else(|| "C:".into());
                    drive.push("\\");
                    PathBuf::from(drive)
                });
            root.join("gcloud")
        }
        None => PathBuf::from(non_empty(env, "HOME")?)
            .join(".config")
            .join("gcloud"),
    };
    Some(directory.join(WELL_KNOWN_FILE))
}

fn non_empty(env: Env<'_>, name: &str) -> Option<OsString> {
    env(name).filter(|value| !value.is_empty())
}

/// The default credentials, loaded: what [`find`] finds, read and checked.
pub(super) fn load(env: Env<'_>, windows: bool, http: &Http) -> Result<Loaded> {
    match find(env, windows) {
        Found::EnvironmentFile(path) => {
            load_file(&path, "the GOOGLE_APPLICATION_CREDENTIALS file", http)
        }
        Found::WellKnownFile(path) => load_file(&path, "gcloud's credentials file", http),
        Found::MetadataServer => Ok(Loaded {
            source: Cached::boxed(MetadataSource::from_env(env, http)?),
            quota_project_id: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use super::*;
    use crate::error::ErrorCode;

    /// An environment of `vars` only.
    fn env_of(vars: &[(&str, &Path)]) -> impl Fn(&str) -> Option<OsString> + use<> {
        let vars: HashMap<String, OsString> = vars
            .iter()
            .map(|(name, value)| ((*name).to_owned(), value.as_os_str().to_owned()))
            .collect();
        move |name| vars.get(name).cloned()
    }

    /// A fresh directory under the system's temporary directory.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "syncguard-adc-{name}-{}-{}",
            std::process::id(),
            crate::driver::generate_lock_id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    const USER: &str = r#"{"type": "authorized_user", "client_id": "id.apps",
        "client_secret": "hunter2-secret", "refresh_token": "hunter2-refresh",
        "quota_project_id": "billing"}"#;

    #[test]
    fn the_well_known_file_is_in_gclouds_configuration_directory() {
        let home = Path::new("/home/u");
        let config = Path::new("/etc/gcloud-config");
        let appdata = Path::new("C:\\Users\\u\\AppData\\Roaming");
        let file = |dir: &Path| Some(dir.join(WELL_KNOWN_FILE));
        let unix = |vars: &[(&str, &Path)]| well_known_file(&env_of(vars), false);
        let windows = |vars: &[(&str, &Path)]| well_known_file(&env_of(vars), true);

        assert_eq!(unix(&[("HOME", home)]), file(&home.join(".config/gcloud")));
        assert_eq!(
            unix(&[("HOME", home), ("CLOUDSDK_CONFIG", config)]),
            file(config)
        );
        // Empty counts as unset.
        assert_eq!(
            unix(&[("HOME", home), ("CLOUDSDK_CONFIG", Path::new(""))]),
            file(&home.join(".config/gcloud"))
        );
        assert_eq!(unix(&[]), None);
        assert_eq!(unix(&[("HOME", Path::new(""))]), None);
        assert_eq!(
            windows(&[("APPDATA", appdata), ("HOME", home)]),
            file(&appdata.join("gcloud"))
        );
        assert_eq!(
            windows(&[("APPDATA", appdata), ("CLOUDSDK_CONFIG", config)]),
            file(config)
        );
        assert_eq!(
            windows(&[("SystemDrive", Path::new("D:"))]),
            file(&Path::new("D:\\").join("gcloud"))
        );
        assert_eq!(windows(&[]), file(&Path::new("C:\\").join("gcloud")));
    }

    #[test]
    fn the_order_is_the_variable_then_the_well_known_file_then_the_metadata_server() {
        let dir = scratch("order");
        let key = dir.join("key.json");
        let config = dir.join("gcloud");
        std::fs::create_dir_all(&config).unwrap();
        let well_known = config.join(WELL_KNOWN_FILE);
        let find_in = |vars: &[(&str, &Path)]| find(&env_of(vars), false);

        // No well-known file yet: the metadata server.
        assert_eq!(
            find_in(&[("CLOUDSDK_CONFIG", &config)]),
            Found::MetadataServer
        );
        std::fs::write(&well_known, USER).unwrap();
        assert_eq!(
            find_in(&[("CLOUDSDK_CONFIG", &config)]),
            Found::WellKnownFile(well_known.clone())
        );
        // The variable wins, even over an existing well-known file and even when its file is
        // missing (that is an error, not a reason to look further).
        assert_eq!(
            find_in(&[
                ("CLOUDSDK_CONFIG", &config),
                ("GOOGLE_APPLICATION_CREDENTIALS", &key)
            ]),
            Found::EnvironmentFile(key.clone())
        );
        assert_eq!(
            find_in(&[
                ("CLOUDSDK_CONFIG", &config),
                ("GOOGLE_APPLICATION_CREDENTIALS", Path::new(""))
            ]),
            Found::WellKnownFile(well_known.clone())
        );
        // HOME leads there too.
        let home = dir.join("home");
        std::fs::create_dir_all(home.join(".config/gcloud")).unwrap();
        std::fs::write(home.join(".config/gcloud").join(WELL_KNOWN_FILE), USER).unwrap();
        assert_eq!(
            find_in(&[("HOME", &home)]),
            Found::WellKnownFile(home.join(".config/gcloud").join(WELL_KNOWN_FILE))
        );
        // A directory by the file's name is not the file.
        std::fs::remove_file(&well_known).unwrap();
        std::fs::create_dir(&well_known).unwrap();
        assert_eq!(
            find_in(&[("CLOUDSDK_CONFIG", &config)]),
            Found::MetadataServer
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn loading_reports_the_file_and_never_its_contents() {
        let dir = scratch("load");
        let http = &Http::for_tests();
        let user = dir.join("user.json");
        std::fs::write(&user, USER).unwrap();
        let loaded = load(
            &env_of(&[("GOOGLE_APPLICATION_CREDENTIALS", &user)]),
            false,
            http,
        )
        .unwrap();
        assert_eq!(
            format!("{:?}", loaded.source),
            "AuthorizedUser { client_id: \"id.apps\", .. }"
        );
        assert_eq!(loaded.quota_project_id.as_deref(), Some("billing"));

        let metadata = load(
            &env_of(&[
                ("HOME", &dir),
                ("GCE_METADATA_HOST", Path::new("127.0.0.1:9")),
            ]),
            false,
            http,
        )
        .unwrap();
        assert_eq!(
            format!("{:?}", metadata.source),
            "MetadataServer { host: \"127.0.0.1:9\", .. }"
        );

        let missing = dir.join("missing.json");
        let invalid = dir.join("invalid.json");
        std::fs::write(
            &invalid,
            r#"{"type": "authorized_user", "refresh_token": "hunter2"#,
        )
        .unwrap();
        let unsupported = dir.join("unsupported.json");
        std::fs::write(
            &unsupported,
            r#"{"type": "external_account_authorized_user", "refresh_token": "hunter2"}"#,
        )
        .unwrap();
        let incomplete = dir.join("incomplete.json");
        std::fs::write(
            &incomplete,
            r#"{"type": "authorized_user", "client_id": "id", "client_secret": "hunter2"}"#,
        )
        .unwrap();
        let config = dir.join("gcloud");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::copy(&invalid, config.join(WELL_KNOWN_FILE)).unwrap();
        for (vars, expected) in [
            (
                vec![("GOOGLE_APPLICATION_CREDENTIALS", missing.as_path())],
                format!(
                    "could not read the GOOGLE_APPLICATION_CREDENTIALS file {}:",
                    missing.display()
                ),
            ),
            (
                vec![("GOOGLE_APPLICATION_CREDENTIALS", invalid.as_path())],
                format!(
                    "the GOOGLE_APPLICATION_CREDENTIALS file {}: the credentials JSON is not \
                     valid JSON (line 1, column",
                    invalid.display()
                ),
            ),
            (
                vec![("GOOGLE_APPLICATION_CREDENTIALS", unsupported.as_path())],
                format!(
                    "{}: credentials of type `external_account_authorized_user` are not \
                     supported",
                    unsupported.display()
                ),
            ),
            (
                vec![("GOOGLE_APPLICATION_CREDENTIALS", incomplete.as_path())],
                format!(
                    "{}: the `authorized_user` credentials' `refresh_token` is missing",
                    incomplete.display()
                ),
            ),
            (
                vec![("CLOUDSDK_CONFIG", config.as_path())],
                format!(
                    "gcloud's credentials file {}: the credentials JSON is not valid JSON",
                    config.join(WELL_KNOWN_FILE).display()
                ),
            ),
        ] {
            let err = load(&env_of(&vars), false, http).err().unwrap();
            assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
            assert!(err.message().contains(&expected), "{expected}\n{err}");
            assert!(!format!("{err} {err:?}").contains("hunter2"), "{err:?}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
