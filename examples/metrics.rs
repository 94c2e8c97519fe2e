//! The `syncguard_*` metrics of the feature `metrics`, served to Prometheus by
//! `metrics-exporter-prometheus` from a plain blocking program: no async runtime, the scrape
//! endpoint is a `std::net::TcpListener` on a thread of its own.
//!
//! ```text
//! cargo run --example metrics --features metrics                # memory: locks in this process
//! cargo run --example metrics --features metrics,redis -- --url redis://127.0.0.1:6379/
//! curl http://127.0.0.1:9464/metrics                            # what Prometheus scrapes
//! cargo run --example metrics --features metrics -- --once      # one lock, the page, exit
//! ```
//!
//! Options: `--url URL` (else `$SYNCGUARD_URL`, else `memory:`), `--listen ADDR` (else
//! `$SYNCGUARD_METRICS_ADDR`, else `127.0.0.1:9464`), `--once`. Prometheus' side:
//!
//! ```text
//! scrape_configs:
//!   - job_name: syncguard
//!     static_configs: [{ targets: ["127.0.0.1:9464"] }]
//! ```

use std::convert::Infallible;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use syncguard::{LockBackend, Locker};

const USAGE: &str = "usage: metrics [--url URL] [--listen ADDR] [--once]";

/// How long a scraper may take to send its request: the one serving thread waits for no one
/// longer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The most of a request read (the request line and headers); the rest is not looked at.
const REQUEST_LIMIT: u64 = 16 * 1024;

/// How often the recorder's histograms are folded into their summaries, as the exporter's own
/// listener would (its default).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

struct Args {
    url: String,
    listen: String,
    once: bool,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut parsed = Args {
        url: std::env::var("SYNCGUARD_URL").unwrap_or_else(|_| "memory:".into()),
        listen: std::env::var("SYNCGUARD_METRICS_ADDR").unwrap_or_else(|_| "127.0.0.1:9464".into()),
        once: false,
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--url" => parsed.url = args.next().ok_or("--url needs a URL")?,
            "--listen" => parsed.listen = args.next().ok_or("--listen needs an address")?,
            "--once" => parsed.once = true,
            "--help" | "-h" => return Ok(None),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Some(parsed))
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    // The recorder first: a Locker registers its metrics with the recorder installed when it
    // is made, and one made before records into the no-op recorder for good.
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| format!("could not install the Prometheus recorder: {e}"))?;
    // The URL may hold a password: errors name its scheme only.
    let backend = syncguard::connect(&args.url).map_err(lock_error)?;
    let backend_name = backend.capabilities().backend;
    let locker = Locker::new(backend);
    let key = format!(
        "example:metrics:{}",
        &syncguard::driver::generate_lock_id()[..8]
    );

    if args.once {
        locker
            .lock(&key)
            .map_err(lock_error)?
            .release()
            .map_err(lock_error)?;
        return io::stdout()
            .write_all(handle.render().as_bytes())
            .map_err(|e| format!("could not write to stdout: {e}"));
    }

    let listener = TcpListener::bind(&args.listen)
        .map_err(|e| format!("could not listen on {}: {e}", args.listen))?;
    let address = listener
        .local_addr()
        .map_err(|e| format!("no local address: {e}"))?;
    println!("locking {key:?} on {backend_name}; scrape http://{address}/metrics (Ctrl-C to stop)");
    let upkeep = handle.clone();
    thread::spawn(move || {
        loop {
            thread::sleep(UPKEEP_EVERY);
            upkeep.run_upkeep();
        }
    });
    thread::spawn(move || serve(&listener, &handle));

    // Two workers take turns on one key, so that waits, holds and refused `try_lock`s show.
    // They run until one fails, which ends the program.
    let (failed, failure) = mpsc::channel();
    for _ in 0..2 {
        let (locker, key, failed) = (locker.clone(), key.clone(), failed.clone());
        thread::spawn(move || failed.send(work(&locker, &key)));
    }
    match failure.recv() {
        Ok(Err(message)) => Err(message),
        Ok(Ok(never)) => match never {},
        Err(_) => Err("the workers ended".into()),
    }
}

/// Takes the lock, holds it a moment, lets it go, over and over.
fn work(locker: &Locker<Box<dyn LockBackend>>, key: &str) -> Result<Infallible, String> {
    loop {
        let guard = locker.lock(key).map_err(lock_error)?;
        // Held, so a second attempt is refused (`outcome="locked"`).
        let refused = locker.try_lock(key).map_err(lock_error)?;
        drop(refused);
        thread::sleep(Duration::from_millis(300));
        guard.release().map_err(lock_error)?;
        thread::sleep(Duration::from_millis(200));
    }
}

fn lock_error(error: syncguard::LockError) -> String {
    format!("{}: {}", error.code(), error.message())
}

/// Answers scrapes one at a time: Prometheus asks every few seconds, and rendering is quick.
fn serve(listener: &TcpListener, handle: &PrometheusHandle) {
    for stream in listener.incoming() {
        let answered = stream.and_then(|stream| answer(&stream, handle));
        if let Err(error) = answered {
            eprintln!("a scrape failed: {error}");
        }
    }
}

/// One HTTP/1.0 exchange: `GET /metrics` gets the exposition, anything else a 404.
fn answer(stream: &TcpStream, handle: &PrometheusHandle) -> io::Result<()> {
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    let mut request = BufReader::new(Read::take(stream, REQUEST_LIMIT));
    let mut request_line = String::new();
    request.read_line(&mut request_line)?;
    // Read the headers to the blank line: closing a socket with unread input resets the
    // connection, and the client may lose the answer.
    let mut header = String::new();
    while request.read_line(&mut header)? > 0 && !header.trim_end().is_empty() {
        header.clear();
    }
    let mut words = request_line.split_whitespace();
    let (status, body) = match (words.next(), words.next()) {
        (Some("GET"), Some(path)) if path.split('?').next() == Some("/metrics") => {
            ("200 OK", handle.render())
        }
        _ => ("404 Not Found", "only GET /metrics is served\n".to_owned()),
    };
    let mut writer = stream;
    write!(
        writer,
        "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    writer.flush()
}
