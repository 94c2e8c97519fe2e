//! What a Redis URL says, checked before any I/O: where the server, Cluster or Sentinels are
//! (with the hosts of a multi-host URL read by `hosts.rs`), syncguard's own parameters, what
//! messages may show, and the timeouts every connection gets.

use std::path::PathBuf;
use std::time::Duration;

use super::hosts::{HostsKind, MULTI_HOST_SCHEMES, MultiHostUrl, split_hosts};
use super::layout::KeyLayout;
use crate::duration::parse_duration;
use crate::error::{LockError, Result};
use crate::net::{UrlParams, split_url};

/// A Redis URL taken apart: what the client gets, what may be shown, and our own options.
pub(crate) struct ParsedUrl {
    /// The URL without syncguard's query parameters, for the `redis` crate.
    pub client_url: String,
    /// The URL with any password replaced by `***`.
    pub display: String,
    /// Where the server is, for messages: `at HOST:PORT`, with ` (db N)` when N is not 0.
    pub location: String,
    /// `?prefix=`.
    pub prefix: Option<String>,
    /// Passwords found in the URL, to scrub from error messages.
    pub secrets: Vec<String>,
    pub tls: bool,
    /// `?tls_ca_file=`: CA certificates to trust besides the system's (`rediss://` only).
    pub ca_file: Option<PathBuf>,
    /// `?layout=`.
    pub layout: Option<KeyLayout>,
    /// `?min_replicas=`.
    pub min_replicas: Option<u32>,
    /// `?replica_timeout=`.
    pub replica_timeout: Option<Duration>,
    /// `?list_scan_budget=`.
    pub list_scan_budget: Option<usize>,
    /// One server, a Cluster, or a primary behind Sentinels.
    pub topology: Topology,
}

/// What a URL connects to.
pub(crate) enum Topology {
    /// One server (`redis://`, `rediss://`, sockets): `client_url`.
    Single,
    /// A Cluster, through these seed nodes (`redis[s]://` URLs, and `host:port` each).
    Cluster {
        nodes: Vec<String>,
        addresses: Vec<String>,
    },
    /// The primary the Sentinels name.
    Sentinel(SentinelSpec),
}

/// The port the `redis` crate uses when a URL names none.
const DEFAULT_PORT: u16 = 6379;

/// The schemes a single-server Redis URL may have.
const SCHEMES: [&str; 4] = ["redis", "rediss", "redis+unix", "unix"];

/// The query parameters syncguard reads from a Sentinel URL: those of every Redis URL
/// ([`OURS`]), then the Sentinels' own credentials.
const SENTINEL_OURS: &[&str] = &[
    "prefix",
    "tls_ca_file",
    "layout",
    "min_replicas",
    "replica_timeout",
    "list_scan_budget",
    "sentinel_user",
    "sentinel_password",
];
/// The query parameters syncguard reads from every Redis URL.
const OURS: &[&str] = SENTINEL_OURS.split_at(6).0;

/// What the `redis` crate reads from the query of a TCP URL (`redis://`, `rediss://`).
const TCP_PARAMS: &[&str] = &["protocol"];
/// What it reads from the query of a socket URL (`redis+unix://`, `unix://`).
const UNIX_PARAMS: &[&str] = &["protocol", "db", "user", "pass"];

/// Takes a Redis URL apart and checks, before any I/O, everything the `redis` crate would
/// otherwise ignore or only refuse when connecting: parameters it does not read for this kind
/// of URL, a fragment, a database that is not a number, an unknown protocol.
pub(crate) fn parse_url(url: &str) -> Result<ParsedUrl> {
    match split_hosts(url)? {
        Some(multi) => parse_multi_host(&multi),
        None => parse_single(url, OURS).map(|(parsed, _)| parsed),
    }
}

/// A `redis-cluster://` or `redis-sentinel://` URL: its options are checked as those of a
/// `redis://` URL to its first host would be.
fn parse_multi_host(multi: &MultiHostUrl) -> Result<ParsedUrl> {
    let (first_host, first_port) = &multi.hosts[0];
    let ours = match multi.kind {
        HostsKind::Cluster => OURS,
        HostsKind::Sentinel => SENTINEL_OURS,
    };
    let stand_in = multi.single_url(first_host, *first_port, "", multi.query.as_deref());
    let (mut parsed, options) = parse_single(&stand_in, ours)?;
    // The client's own parameters (`protocol`), as they stand in the stand-in's URL.
    let client_query = parsed.client_url.split_once('?').map(|(_, q)| q.to_owned());
    let shown_query = parsed.display.split_once('?').map(|(_, q)| q.to_owned());
    parsed.display = multi.display(shown_query.as_deref());
    match multi.kind {
        HostsKind::Cluster => {
            if !multi.path.is_empty() {
                return Err(LockError::invalid_argument(
                    "a redis-cluster:// URL takes no path: a Cluster has database 0 only \
                     (redis-cluster://h1:p1,h2:p2/?prefix=…)",
                ));
            }
            parsed.location = format!("at cluster nodes {}", multi.host_list());
            parsed.topology = Topology::Cluster {
                nodes: multi
                    .hosts
                    .iter()
                    .map(|(host, port)| multi.single_url(host, *port, "", client_query.as_deref()))
                    .collect(),
                addresses: multi
                    .hosts
                    .iter()
                    .map(|(host, port)| format!("{host}:{port}"))
                    .collect(),
            };
        }
        HostsKind::Sentinel => {
            let mut segments = multi.path.split('/');
            let master = percent_encoding::percent_decode_str(segments.next().unwrap_or(""))
                .decode_utf8_lossy()
                .into_owned();
            if master.trim().is_empty() {
                return Err(LockError::invalid_argument(
                    "a redis-sentinel:// URL names the primary as its path: \
                     redis-sentinel://s1:26379,s2:26379/mymaster",
                ));
            }
            let db = match segments.next() {
                None | Some("") => 0,
                Some(db) => database_number(
                    db,
                    "the database of a Sentinel URL",
                    "redis-sentinel://s1:26379/mymaster/2",
                )?,
            };
            if segments.next().is_some_and(|rest| !rest.is_empty()) {
                return Err(LockError::invalid_argument(
                    "the path of a redis-sentinel:// URL is /NAME or /NAME/DB",
                ));
            }
            let option = |name: &str| {
                options
                    .iter()
                    .find(|(key, _)| key == name)
                    .map(|(_, value)| value.clone())
            };
            let sentinel_user = option("sentinel_user");
            let sentinel_password = option("sentinel_password");
            if let Some(password) = &sentinel_password {
                parsed.secrets.push(password.clone());
                parsed.secrets.push(encode_userinfo(password));
            }
            let sentinel_userinfo = match (&sentinel_user, &sentinel_password) {
                (_, None) if sentinel_user.is_some() => {
                    return Err(LockError::invalid_argument(
                        "the Redis URL parameter `sentinel_user` needs `sentinel_password`",
                    ));
                }
                (user, Some(password)) => Some(format!(
                    "{}:{}",
                    encode_userinfo(user.as_deref().unwrap_or("")),
                    encode_userinfo(password)
                )),
                (_, None) => None,
            };
            let sentinel_urls = MultiHostUrl {
                userinfo: sentinel_userinfo,
                hosts: Vec::new(),
                path: String::new(),
                query: None,
                scheme: String::new(),
                ..*multi
            };
            parsed.location = with_db(
                format!("at primary `{master}` of sentinels {}", multi.host_list()),
                db,
            );
            parsed.topology = Topology::Sentinel(SentinelSpec {
                sentinels: multi
                    .hosts
                    .iter()
                    .map(|(host, port)| sentinel_urls.single_url(host, *port, "", None))
                    .collect(),
                sentinel_addresses: multi
                    .hosts
                    .iter()
                    .map(|(host, port)| format!("{host}:{port}"))
                    .collect(),
                master,
                primary_url: PrimaryUrl {
                    tls: multi.tls,
                    userinfo: multi.userinfo.clone(),
                    db,
                    query: client_query,
                },
            });
        }
    }
    Ok(parsed)
}

/// Percent-encodes a user name or password for a URL's userinfo.
fn encode_userinfo(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// A single-server URL (or a multi-host URL's stand-in), with `ours` as syncguard's own
/// parameters; also returns those parameters as given.
fn parse_single(url: &str, ours: &[&str]) -> Result<(ParsedUrl, Vec<(String, String)>)> {
    let unix = match url::Url::parse(url.trim()) {
        Ok(parsed) if !SCHEMES.contains(&parsed.scheme()) => {
            return Err(LockError::invalid_argument(format!(
                "not a Redis URL (scheme {:?}); expected redis://, rediss://, redis+unix://, \
                 unix://, {}",
                parsed.scheme().chars().take(32).collect::<String>(),
                MULTI_HOST_SCHEMES.map(|s| format!("{s}://")).join(", ")
            )));
        }
        Ok(parsed) => {
            let unix = matches!(parsed.scheme(), "redis+unix" | "unix");
            if !unix {
                refuse_socket_params(&parsed)?;
            }
            unix
        }
        // split_url says what is wrong.
        Err(_) => false,
    };
    let split = split_url(
        url,
        "Redis",
        &UrlParams {
            ours,
            client: if unix { UNIX_PARAMS } else { TCP_PARAMS },
        },
    )?;
    let parsed = &split.url;
    if parsed.fragment().is_some() {
        return Err(LockError::invalid_argument(
            "a Redis URL takes no fragment (`#…`); `#insecure` (TLS without certificate checks) \
             is not supported",
        ));
    }
    // The `redis` crate reads the last of a repeated parameter; one value leaves no doubt.
    let names: Vec<String> = parsed
        .query_pairs()
        .map(|(name, _)| name.into_owned())
        .collect();
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            return Err(LockError::invalid_argument(format!(
                "the Redis URL parameter `{name}` is given twice"
            )));
        }
    }
    let query = |name: &str| {
        parsed
            .query_pairs()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
    };
    if let Some(protocol) = query("protocol")
        && !matches!(protocol.as_str(), "2" | "3" | "resp2" | "resp3")
    {
        return Err(LockError::invalid_argument(
            "the Redis URL parameter `protocol` must be resp2 or resp3 (or 2 or 3)",
        ));
    }
    let location = if unix {
        let db = match query("db") {
            Some(db) => database_number(&db, "the Redis URL parameter `db`", "?db=2")?,
            None => 0,
        };
        let path = parsed.to_file_path().map_err(|()| {
            LockError::invalid_argument("the Redis socket URL names no socket path")
        })?;
        with_db(format!("at unix socket {}", path.display()), db)
    } else {
        let host = match parsed.host() {
            Some(url::Host::Domain(name)) if !name.is_empty() => name.to_owned(),
            Some(url::Host::Domain(_)) | None => {
                return Err(LockError::invalid_argument("the Redis URL names no host"));
            }
            Some(host) => host.to_string(),
        };
        let db = match parsed.path().trim_matches('/') {
            "" => 0,
            path => database_number(path, "the path of a Redis URL", "redis://host:port/2")?,
        };
        let port = parsed.port().unwrap_or(DEFAULT_PORT);
        with_db(format!("at {host}:{port}"), db)
    };
    let tls = split.url.scheme() == "rediss";
    let option = |name: &str| {
        split
            .options
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.clone())
    };
    let ca_file = option("tls_ca_file").map(PathBuf::from);
    if ca_file.is_some() && !tls {
        return Err(LockError::invalid_argument(
            "the Redis URL parameter `tls_ca_file` needs TLS: use a rediss:// URL",
        ));
    }
    let layout = option("layout")
        .map(|value| KeyLayout::from_url_value(&value))
        .transpose()?;
    let min_replicas = at_least_one::<u32>(option("min_replicas"), "min_replicas", "replicas")?;
    let replica_timeout = option("replica_timeout")
        .map(|value| {
            parse_duration(&value).map_err(|_| {
                LockError::invalid_argument(
                    "the Redis URL parameter `replica_timeout` must be a duration such as 500ms, \
                     2s or 1500 (milliseconds)",
                )
            })
        })
        .transpose()?;
    let list_scan_budget =
        at_least_one::<usize>(option("list_scan_budget"), "list_scan_budget", "keys")?;
    let options = split.options.clone();
    Ok((
        ParsedUrl {
            tls,
            client_url: split.url.to_string(),
            display: split.display,
            location,
            prefix: option("prefix"),
            secrets: split.secrets,
            ca_file,
            layout,
            min_replicas,
            replica_timeout,
            list_scan_budget,
            topology: Topology::Single,
        },
        options,
    ))
}

/// `db`, `user` and `pass` in the query of a TCP URL: the `redis` crate reads them only for
/// sockets and would silently use database 0 and no password.
/// The URL parameter `name` (its `value`, when given) as a whole number of `what`, at least 1.
fn at_least_one<T: std::str::FromStr + PartialOrd + From<u8>>(
    value: Option<String>,
    name: &str,
    what: &str,
) -> Result<Option<T>> {
    value
        .map(|value| match value.parse::<T>() {
            Ok(n) if n >= T::from(1) => Ok(n),
            _ => Err(LockError::invalid_argument(format!(
                "the Redis URL parameter `{name}` must be a number of {what}, at least 1"
            ))),
        })
        .transpose()
}

fn refuse_socket_params(url: &url::Url) -> Result<()> {
    for (name, _) in url.query_pairs() {
        let how = match name.as_ref() {
            "db" => "give the database as the path: redis://host:port/2",
            "user" | "pass" => "give them before the host: redis://user:password@host:port/",
            _ => continue,
        };
        return Err(LockError::invalid_argument(format!(
            "the Redis URL parameter `{name}` is read only for unix sockets (redis+unix://); \
             for redis:// and rediss:// {how}"
        )));
    }
    Ok(())
}

/// A database number (what `SELECT` takes), or an error naming `what` without its value.
fn database_number(text: &str, what: &str, example: &str) -> Result<u32> {
    text.parse::<u32>().map_err(|_| {
        LockError::invalid_argument(format!(
            "{what} must be a database number (0, 1, …): {example}"
        ))
    })
}

/// `location`, followed by ` (db N)` when N is not the default 0.
fn with_db(location: String, db: u32) -> String {
    if db == 0 {
        location
    } else {
        format!("{location} (db {db})")
    }
}

/// Timeouts applied to every connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub connect: Duration,
    pub read: Duration,
    pub write: Duration,
    pub checkout: Duration,
}

/// What a `redis-sentinel://` URL says: where the Sentinels are, the primary's name, and how
/// to log in to each.
#[derive(Clone)]
pub(crate) struct SentinelSpec {
    /// `redis[s]://[sentinel credentials@]host:port/` for each Sentinel.
    pub sentinels: Vec<String>,
    /// `host:port` of each Sentinel, for messages.
    pub sentinel_addresses: Vec<String>,
    /// The primary's name in the Sentinels' configuration.
    pub master: String,
    /// Builds the URL of the primary at `host`, `port` (with the data credentials, database and
    /// protocol of the URL).
    pub primary_url: PrimaryUrl,
}

/// The parts of a primary's URL that do not depend on where it is.
#[derive(Clone)]
pub(crate) struct PrimaryUrl {
    pub tls: bool,
    pub userinfo: Option<String>,
    pub db: u32,
    pub query: Option<String>,
}

impl PrimaryUrl {
    /// The primary's URL at `host`:`port`, as a Sentinel names it.
    pub fn at(&self, host: &str, port: u16) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let userinfo = match &self.userinfo {
            Some(userinfo) => format!("{userinfo}@"),
            None => String::new(),
        };
        // An IPv6 address from a Sentinel comes without brackets.
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        let query = match &self.query {
            Some(query) => format!("?{query}"),
            None => String::new(),
        };
        format!("{scheme}://{userinfo}{host}:{port}/{}{query}", self.db)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn urls_lose_our_options_and_hide_passwords() {
        let p =
            parse_url("redis://app:s%40cret@127.0.0.1:6380/2?prefix=jobs&protocol=resp3").unwrap();
        assert_eq!(
            p.client_url,
            "redis://app:s%40cret@127.0.0.1:6380/2?protocol=resp3"
        );
        assert_eq!(p.display, "redis://app:***@127.0.0.1:6380/2?protocol=resp3");
        assert_eq!(p.prefix.as_deref(), Some("jobs"));
        assert!(p.secrets.contains(&"s@cret".to_owned()));
        assert!(!p.tls);

        let p = parse_url("redis+unix:///run/redis.sock?db=1&pass=topsecret").unwrap();
        assert!(!p.display.contains("topsecret"), "{}", p.display);
        assert_eq!(p.secrets, ["topsecret"]);
        assert!(parse_url("rediss://h/").unwrap().tls);
        let p = parse_url("rediss://h/?tls_ca_file=/etc/ca.pem&prefix=jobs").unwrap();
        assert_eq!(p.ca_file.as_deref(), Some(Path::new("/etc/ca.pem")));
        assert_eq!(p.prefix.as_deref(), Some("jobs"));
        assert_eq!(p.client_url, "rediss://h/");
    }

    #[test]
    fn cluster_and_sentinel_urls_are_taken_apart_without_showing_secrets() {
        let p = parse_url(
            "redis-cluster://app:s%40cret@10.0.0.1:7000,10.0.0.2/?prefix=jobs&protocol=resp3\
             &min_replicas=1&replica_timeout=250ms&list_scan_budget=2000000",
        )
        .unwrap();
        assert_eq!(p.list_scan_budget, Some(2_000_000));
        assert_eq!(
            p.display,
            "redis-cluster://app:***@10.0.0.1:7000,10.0.0.2:6379/?protocol=resp3"
        );
        assert_eq!(p.location, "at cluster nodes 10.0.0.1:7000, 10.0.0.2:6379");
        assert_eq!(p.prefix.as_deref(), Some("jobs"));
        assert_eq!(p.min_replicas, Some(1));
        assert_eq!(p.replica_timeout, Some(Duration::from_millis(250)));
        assert!(p.secrets.contains(&"s@cret".to_owned()));
        let Topology::Cluster { nodes, addresses } = &p.topology else {
            panic!("a cluster URL");
        };
        assert_eq!(
            nodes,
            &[
                "redis://app:s%40cret@10.0.0.1:7000/?protocol=resp3",
                "redis://app:s%40cret@10.0.0.2:6379/?protocol=resp3"
            ]
        );
        assert_eq!(addresses, &["10.0.0.1:7000", "10.0.0.2:6379"]);

        let p = parse_url(
            "rediss-sentinel://:data-pw@s1,s2:26380/my%20primary/3?sentinel_password=sent-pw\
             &layout=cluster",
        )
        .unwrap();
        assert_eq!(
            p.display,
            "rediss-sentinel://:***@s1:26379,s2:26380/my%20primary/3"
        );
        assert!(!p.display.contains("sent-pw"));
        assert_eq!(
            p.location,
            "at primary `my primary` of sentinels s1:26379, s2:26380 (db 3)"
        );
        assert_eq!(p.layout, Some(KeyLayout::Cluster));
        for secret in ["data-pw", "sent-pw"] {
            assert!(p.secrets.contains(&secret.to_owned()), "{secret}");
        }
        let Topology::Sentinel(spec) = &p.topology else {
            panic!("a Sentinel URL");
        };
        assert_eq!(
            spec.sentinels,
            [
                "rediss://:sent%2Dpw@s1:26379/",
                "rediss://:sent%2Dpw@s2:26380/"
            ]
        );
        assert_eq!(spec.master, "my primary");
        assert!(p.tls);
    }

    #[test]
    fn locations_name_host_port_and_database() {
        let location = |url: &str| parse_url(url).unwrap().location;
        assert_eq!(
            location("redis://:pw@cache.internal/"),
            "at cache.internal:6379"
        );
        assert_eq!(location("rediss://h:6380/0"), "at h:6380");
        assert_eq!(location("redis://h:6380/2?prefix=x"), "at h:6380 (db 2)");
        assert_eq!(location("redis://[::1]:7000/"), "at [::1]:7000");
        assert_eq!(
            location("redis+unix:///run/redis.sock?db=3&pass=pw"),
            "at unix socket /run/redis.sock (db 3)"
        );
    }

    #[test]
    fn bad_urls_are_invalid_arguments_without_echo() {
        crate::error::assert_refused_without_secret(
            &[
                "",
                "redis//x:hunter2@h",
                "http://x:hunter2@h/",
                "redis://x:hunter2@h:notaport/",
            ],
            parse_url,
        );
    }

    #[test]
    fn primary_urls_carry_credentials_database_and_protocol() {
        let url = PrimaryUrl {
            tls: false,
            userinfo: Some("app:s%40cret".to_owned()),
            db: 2,
            query: Some("protocol=resp3".to_owned()),
        };
        assert_eq!(
            url.at("10.0.0.5", 6380),
            "redis://app:s%40cret@10.0.0.5:6380/2?protocol=resp3"
        );
        assert_eq!(
            PrimaryUrl {
                tls: true,
                userinfo: None,
                db: 0,
                query: None
            }
            .at("::1", 6379),
            "rediss://[::1]:6379/0"
        );
    }
}
