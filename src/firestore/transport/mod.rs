//! The HTTP client of the Firestore backend and of its token requests: HTTP/1.1 over TCP or
//! TLS (rustls, the roots and provider of `crate::tls`), through an `http://` proxy from the
//! environment or not, with kept-alive connections and one deadline per request.
//!
//! Why not a general-purpose client: every request here carries a secret (an
//! `Authorization: Bearer` token, a JWT assertion, a refresh token, a client secret) and every
//! token answer holds an access token, and the client the backend used before (`ureq`)
//! hex-dumps whole requests and answers at TRACE level through `log` (`ureq_proto`), with no
//! switch to turn that off for one agent. A program that logs at TRACE would have written the
//! secrets to its logs. This client logs nothing at all; what it needs of HTTP is small.

mod error;
mod proxy;
mod stream;
mod wire;

use std::io::BufReader;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;

pub(crate) use self::error::Error;
use self::proxy::Proxy;
use self::stream::Stream;

/// How an agent makes its requests.
pub(crate) struct Config {
    /// The time budget of each request, connecting included.
    pub timeout: Duration,
    /// Whom HTTPS trusts.
    pub tls: Arc<rustls::ClientConfig>,
    /// Ignore the proxy the environment sets (for endpoints no proxy can reach).
    pub direct: bool,
    /// The longest answer body read.
    pub body_limit: u64,
    /// Idle connections kept open for later requests.
    pub max_idle: usize,
}

/// Where a connection goes: a connection is reused only for the same.
#[derive(Clone, PartialEq, Eq)]
struct Route {
    https: bool,
    host: String,
    port: u16,
    proxy: Option<Proxy>,
}

/// A client: its configuration and its idle connections. Cheap to clone (shared).
#[derive(Clone)]
pub(crate) struct Agent {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    idle: Mutex<Vec<(Route, BufReader<Stream>)>>,
}

/// A request being built.
#[must_use = "a request is sent by send_json, send_form or call"]
pub(crate) struct Request<'a> {
    agent: &'a Agent,
    method: &'static str,
    url: &'a str,
    headers: Vec<(String, String)>,
    bad_header: Option<String>,
}

/// A whole answer.
pub(crate) struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// The status and the body's length: the body may hold a token.
impl std::fmt::Debug for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Response({}, {} bytes)", self.status, self.body.len())
    }
}

impl Agent {
    pub fn new(config: Config) -> Agent {
        Agent {
            inner: Arc::new(Inner {
                config,
                idle: Mutex::new(Vec::new()),
            }),
        }
    }

    pub fn get<'a>(&'a self, url: &'a str) -> Request<'a> {
        self.request("GET", url)
    }

    pub fn post<'a>(&'a self, url: &'a str) -> Request<'a> {
        self.request("POST", url)
    }

    fn request<'a>(&'a self, method: &'static str, url: &'a str) -> Request<'a> {
        Request {
            agent: self,
            method,
            url,
            headers: vec![(
                "User-Agent".to_owned(),
                concat!("syncguard/", env!("CARGO_PKG_VERSION")).to_owned(),
            )],
            bad_header: None,
        }
    }

    /// An idle connection on `route` the server has not closed, if any.
    fn take_idle(&self, route: &Route) -> Option<BufReader<Stream>> {
        let mut idle = self
            .inner
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while let Some(index) = idle.iter().rposition(|(r, _)| r == route) {
            let (_, connection) = idle.swap_remove(index);
            if connection.get_ref().is_reusable() {
                return Some(connection);
            }
        }
        None
    }

    fn put_idle(&self, route: Route, connection: BufReader<Stream>) {
        let mut idle = self
            .inner
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if idle.len() < self.inner.config.max_idle {
            idle.push((route, connection));
        }
    }
}

impl Request<'_> {
    /// Adds a header. One that cannot go on the wire (a line break in a value, say) fails the
    /// request when it is sent, naming the header but not its value.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        if wire::is_valid_header(name, value) {
            self.headers.push((name.to_owned(), value.to_owned()));
        } else {
            self.bad_header.get_or_insert_with(|| name.to_owned());
        }
        self
    }

    /// Sends `body` as JSON.
    pub fn send_json(self, body: &Value) -> Result<Response, Error> {
        let body = serde_json::to_vec(body)
            .map_err(|_| Error::BadRequest("the request body is not JSON".to_owned()))?;
        self.send("application/json", &body)
    }

    /// Sends `pairs` as an `application/x-www-form-urlencoded` form.
    pub fn send_form<'p>(
        self,
        pairs: impl IntoIterator<Item = (&'p str, &'p str)>,
    ) -> Result<Response, Error> {
        let mut form = url::form_urlencoded::Serializer::new(String::new());
        for (name, value) in pairs {
            form.append_pair(name, value);
        }
        self.send(
            "application/x-www-form-urlencoded",
            form.finish().as_bytes(),
        )
    }

    /// Sends the request without a body.
    pub fn call(self) -> Result<Response, Error> {
        self.execute(None)
    }

    fn send(mut self, content_type: &str, body: &[u8]) -> Result<Response, Error> {
        self.headers
            .push(("Content-Type".to_owned(), content_type.to_owned()));
        self.execute(Some(body))
    }

    fn execute(self, body: Option<&[u8]>) -> Result<Response, Error> {
        if let Some(name) = &self.bad_header {
            return Err(Error::BadRequest(format!(
                "the {name} header has characters an HTTP header cannot carry"
            )));
        }
        let config = &self.agent.inner.config;
        let deadline = Instant::now() + config.timeout;
        // The message does not quote the URL: its query may carry a secret.
        let bad_url = || Error::BadRequest("not a valid http or https URL".to_owned());
        let url = url::Url::parse(self.url).map_err(|_| bad_url())?;
        let https = match url.scheme() {
            "https" => true,
            "http" => false,
            _ => return Err(bad_url()),
        };
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(bad_url)?;
        let port = url.port_or_known_default().ok_or_else(bad_url)?;
        let proxy = if config.direct {
            None
        } else {
            proxy::from_env(url.scheme(), host, &|name| std::env::var(name).ok())?
        };
        let route = Route {
            https,
            host: host.to_owned(),
            port,
            proxy,
        };
        let mut target = url.path().to_owned();
        if let Some(query) = url.query() {
            target.push('?');
            target.push_str(query);
        }
        if route.proxy.is_some() && !https {
            // A plain request through a proxy names the whole URL.
            target = format!("http://{}:{port}{target}", route.host);
        }
        let authority = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        let mut headers = vec![("Host".to_owned(), authority)];
        headers.extend(self.headers);
        if let (Some(proxy), false) = (&route.proxy, https)
            && let Some(authorization) = &proxy.authorization
        {
            headers.push(("Proxy-Authorization".to_owned(), authorization.clone()));
        }

        let mut reused = self.agent.take_idle(&route);
        let mut connection = loop {
            let (mut connection, was_idle) = match reused.take() {
                Some(mut connection) => {
                    connection.get_mut().set_deadline(deadline);
                    (connection, true)
                }
                None => {
                    let tls = https.then_some(&config.tls);
                    let stream = Stream::connect(host, port, route.proxy.as_ref(), tls, deadline)?;
                    (BufReader::new(stream), false)
                }
            };
            match wire::write_request(connection.get_mut(), self.method, &target, &headers, body) {
                Ok(()) => break connection,
                // The server closed an idle connection as this request went out: it could not
                // have received the whole request, so it is sent again on a new connection.
                Err(Error::Io(_)) if was_idle => {}
                Err(error) => return Err(error),
            }
        };
        let head = wire::read_head(&mut connection, self.method == "HEAD")?;
        let body = wire::read_body(&mut connection, head.framing, config.body_limit)?;
        if head.keep_alive && connection.buffer().is_empty() {
            self.agent.put_idle(route, connection);
        }
        Ok(Response {
            status: head.status,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A server on this machine that answers every request `{}` on kept-alive connections,
    /// and counts the connections it accepted.
    fn counting_server() -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/x", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&accepted);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                counter.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut writer = stream;
                    loop {
                        let mut length = 0;
                        loop {
                            let mut line = String::new();
                            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                                return;
                            }
                            if line == "\r\n" {
                                break;
                            }
                            if let Some(value) =
                                line.to_ascii_lowercase().strip_prefix("content-length:")
                            {
                                length = value.trim().parse().unwrap();
                            }
                        }
                        let mut body = vec![0; length];
                        reader.read_exact(&mut body).unwrap();
                        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
                        if writer.write_all(answer).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (url, accepted)
    }

    fn agent() -> Agent {
        let tls = crate::tls::TlsRoots::load(None, false)
            .unwrap()
            .client_config()
            .unwrap();
        Agent::new(Config {
            timeout: Duration::from_secs(30),
            tls: Arc::new(tls),
            direct: true,
            body_limit: 1024,
            max_idle: 4,
        })
    }

    #[test]
    fn connections_are_kept_alive_and_reused() {
        let (url, accepted) = counting_server();
        let agent = agent();
        for _ in 0..5 {
            let response = agent.post(&url).send_json(&serde_json::json!({})).unwrap();
            assert_eq!(
                (response.status, response.body.as_slice()),
                (200, &b"{}"[..])
            );
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "one connection for all");
    }

    #[test]
    fn headers_that_cannot_go_on_the_wire_are_refused_unquoted() {
        let err = agent()
            .get("http://127.0.0.1:1/")
            .header("Authorization", "Bearer secret\r\nX: y")
            .call()
            .unwrap_err();
        assert!(matches!(err, Error::BadRequest(_)), "{err:?}");
        assert!(!err.to_string().contains("secret"), "{err}");
        let err = agent().get("ftp://secret@host/").call().unwrap_err();
        assert!(!err.to_string().contains("secret"), "{err}");
    }
}
