//! Google's Firestore emulator for the tests.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};
use syncguard::firestore::{FirestoreBackend, FirestoreBuilder};

use super::{Instance, PATIENT, Service, free_port, require_program};

/// Where the Google Cloud SDK puts the emulator (override with `SYNCGUARD_FIRESTORE_EMULATOR_JAR`).
const EMULATOR_JAR: &str =
    "/usr/lib/google-cloud-sdk/platform/cloud-firestore-emulator/cloud-firestore-emulator.jar";

/// The project every test uses.
pub const FIRESTORE_PROJECT: &str = "syncguard-test";

/// A Firestore emulator of its own on a free port.
pub struct FirestoreEmulator {
    pub port: u16,
    instance: Instance,
}

impl FirestoreEmulator {
    pub fn start() -> FirestoreEmulator {
        let java = require_program("java", "openjdk-17-jre-headless");
        let jar = std::env::var_os("SYNCGUARD_FIRESTORE_EMULATOR_JAR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(EMULATOR_JAR));
        assert!(
            jar.is_file(),
            "the Firestore emulator is not installed at {} (it ships with the Google Cloud SDK's \
             cloud-firestore-emulator component); set SYNCGUARD_FIRESTORE_EMULATOR_JAR to its jar",
            jar.display()
        );
        let port = free_port();
        let mut instance = Instance::new("firestore");
        // The SDK's launcher script does not exec Java, so stopping it would orphan the JVM:
        // run the JVM directly.
        let args: Vec<String> = vec![
            "-Duser.language=en".to_owned(),
            "-Xmx512m".to_owned(),
            // The client compiler only, and one garbage collector thread: the emulator serves
            // the tests for a few minutes, too short for the optimising compiler to pay for the
            // CPU it takes from them. Measured (the Firestore tests alone, 6 at a time, 2 cores):
            // 218 → 135 CPU seconds, 111 → 80 s.
            "-XX:TieredStopAtLevel=1".to_owned(),
            "-XX:+UseSerialGC".to_owned(),
            "-cp".to_owned(),
            jar.to_string_lossy().into_owned(),
            "com.google.cloud.datastore.emulator.firestore.CloudFirestore".to_owned(),
            "start".to_owned(),
            "--host=127.0.0.1".to_owned(),
            format!("--port={port}"),
        ];
        let service = Service::spawn(
            &format!("the Firestore emulator on port {port}"),
            &java,
            &args,
            &instance.dir().join("emulator.log"),
        );
        let url = format!("http://127.0.0.1:{port}/");
        let agent = ureq::Agent::new_with_config(
            ureq::Agent::config_builder()
                .timeout_global(Some(Duration::from_millis(500)))
                .build(),
        );
        service.await_ready(Duration::from_secs(60), || {
            agent
                .get(&url)
                .call()
                .ok()
                .and_then(|response| response.into_body().read_to_string().ok())
                .is_some_and(|body| body.trim() == "Ok")
        });
        instance.running(service);
        FirestoreEmulator { port, instance }
    }

    /// `127.0.0.1:<port>`, what `FIRESTORE_EMULATOR_HOST` would hold.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A builder for a backend on this emulator, whose request timeout is a [`PATIENT`] hang
    /// guard: the emulator, a JVM, can pause for seconds on a loaded machine.
    pub fn builder(&self) -> FirestoreBuilder {
        FirestoreBackend::builder()
            .project(FIRESTORE_PROJECT)
            .emulator_host(self.host())
            .timeout(PATIENT)
    }

    /// A backend on this emulator (see [`builder`](Self::builder)).
    pub fn backend(&self) -> FirestoreBackend {
        self.builder()
            .build()
            .expect("a Firestore backend for the emulator")
    }

    /// Documents endpoint of the test project, for looking at what syncguard stored.
    pub fn documents_url(&self) -> String {
        format!(
            "http://127.0.0.1:{}/v1/projects/{FIRESTORE_PROJECT}/databases/(default)/documents",
            self.port
        )
    }
}

/// One emulator shared by every test, of every area.
pub fn shared_firestore() -> &'static FirestoreEmulator {
    static EMULATOR: OnceLock<FirestoreEmulator> = OnceLock::new();
    EMULATOR.get_or_init(FirestoreEmulator::start)
}

/// A builder for a backend on [`shared_firestore`] (see [`FirestoreEmulator::builder`]).
pub fn shared_firestore_builder() -> FirestoreBuilder {
    shared_firestore().builder()
}

/// A backend on [`shared_firestore`].
pub fn shared_firestore_backend() -> FirestoreBackend {
    shared_firestore().backend()
}

/// A plain HTTP client for looking at and changing what the emulator holds, bypassing
/// syncguard.
pub fn emulator_agent() -> ureq::Agent {
    ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .timeout_global(Some(PATIENT))
            .http_status_as_error(false)
            .build(),
    )
}

/// A document as the shared emulator holds it (`None` when missing), read with a plain request.
pub fn raw_document(collection: &str, id: &str) -> Option<Value> {
    let name =
        format!("projects/{FIRESTORE_PROJECT}/databases/(default)/documents/{collection}/{id}");
    let answer: Value = emulator_agent()
        .post(format!("{}:batchGet", shared_firestore().documents_url()))
        .header("Authorization", "Bearer owner")
        .send_json(json!({ "documents": [name] }))
        .unwrap()
        .into_body()
        .read_json()
        .unwrap();
    answer
        .as_array()?
        .iter()
        .find_map(|item| item.get("found").cloned())
}

/// Writes a document of the shared emulator directly (whole: fields not given are removed),
/// bypassing syncguard.
pub fn write_document(collection: &str, id: &str, fields: Value) {
    let name =
        format!("projects/{FIRESTORE_PROJECT}/databases/(default)/documents/{collection}/{id}");
    let response = emulator_agent()
        .post(format!("{}:commit", shared_firestore().documents_url()))
        .header("Authorization", "Bearer owner")
        .send_json(json!({ "writes": [{ "update": { "name": name, "fields": fields } }] }))
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
}
