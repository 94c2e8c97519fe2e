//! URLs that name several hosts: a Cluster's seed nodes (`redis-cluster://h1:p1,h2:p2/`) and
//! the Sentinels of a primary (`redis-sentinel://s1:p1,s2:p2/NAME`). `url::Url` takes one host,
//! so the host list is taken apart here and the rest is checked like a `redis://` URL.

use crate::error::{LockError, Result};

/// What a multi-host URL points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostsKind {
    Cluster,
    Sentinel,
}

impl HostsKind {
    /// The port a host without one gets.
    fn default_port(self) -> u16 {
        match self {
            HostsKind::Cluster => 6379,
            HostsKind::Sentinel => 26379,
        }
    }
}

/// A multi-host URL taken apart (nothing validated beyond its shape and the hosts).
#[derive(Debug)]
pub(crate) struct MultiHostUrl {
    pub kind: HostsKind,
    /// `rediss-…`: TLS to every node.
    pub tls: bool,
    /// `user:password` or `user` as written (percent-encoded), without the `@`.
    pub userinfo: Option<String>,
    /// `(host, port)`, the host as written (an IPv6 address keeps its brackets).
    pub hosts: Vec<(String, u16)>,
    /// The path without its leading `/` (a Sentinel URL's primary name).
    pub path: String,
    /// The query without its `?`.
    pub query: Option<String>,
    /// The scheme as given, lowercased.
    pub scheme: String,
}

/// The schemes of multi-host URLs.
pub(crate) const MULTI_HOST_SCHEMES: [&str; 4] = [
    "redis-cluster",
    "rediss-cluster",
    "redis-sentinel",
    "rediss-sentinel",
];

/// Takes `url` apart if its scheme is a multi-host one; `Ok(None)` for any other URL.
pub(crate) fn split_hosts(url: &str) -> Result<Option<MultiHostUrl>> {
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(None);
    };
    let scheme = scheme.to_ascii_lowercase();
    let (kind, tls) = match scheme.as_str() {
        "redis-cluster" => (HostsKind::Cluster, false),
        "rediss-cluster" => (HostsKind::Cluster, true),
        "redis-sentinel" => (HostsKind::Sentinel, false),
        "rediss-sentinel" => (HostsKind::Sentinel, true),
        _ => return Ok(None),
    };
    if rest.contains('#') {
        return Err(LockError::invalid_argument(
            "a Redis URL takes no fragment (`#…`); `#insecure` (TLS without certificate checks) \
             is not supported",
        ));
    }
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query.to_owned())),
        None => (rest, None),
    };
    let (authority, path) = match before_query.split_once('/') {
        Some((authority, path)) => (authority, path),
        None => (before_query, ""),
    };
    let (userinfo, host_list) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo.to_owned()), hosts),
        None => (None, authority),
    };
    if userinfo.as_deref().is_some_and(|u| u.contains(['@', ','])) {
        return Err(LockError::invalid_argument(
            "credentials go once in a multi-host Redis URL, before the first host \
             (user:password@h1:p1,h2:p2); percent-encode an `@` in the password as %40",
        ));
    }
    let what = match kind {
        HostsKind::Cluster => "node",
        HostsKind::Sentinel => "sentinel",
    };
    let mut hosts = Vec::new();
    for entry in host_list.split(',') {
        let entry = entry.trim();
        if entry.is_empty() {
            return Err(LockError::invalid_argument(format!(
                "the Redis URL names an empty {what} address: list them as host:port,host:port"
            )));
        }
        hosts.push(host_and_port(entry, kind.default_port(), what)?);
    }
    Ok(Some(MultiHostUrl {
        kind,
        tls,
        userinfo,
        hosts,
        path: path.to_owned(),
        query,
        scheme,
    }))
}

/// `host[:port]` or `[v6]:port`, checked by the URL parser (the message never repeats it).
fn host_and_port(entry: &str, default_port: u16, what: &str) -> Result<(String, u16)> {
    let parsed = url::Url::parse(&format!("redis://{entry}/")).map_err(|e| {
        LockError::invalid_argument(format!(
            "a {what} address in the Redis URL is malformed: {e}"
        ))
    })?;
    let host = match parsed.host() {
        Some(url::Host::Domain(name)) if !name.is_empty() => name.to_owned(),
        Some(url::Host::Domain(_)) | None => {
            return Err(LockError::invalid_argument(format!(
                "a {what} address in the Redis URL names no host"
            )));
        }
        Some(host) => host.to_string(),
    };
    if !parsed.username().is_empty() || parsed.password().is_some() || parsed.path() != "/" {
        return Err(LockError::invalid_argument(format!(
            "a {what} address in the Redis URL must be host:port (credentials go once, before \
             the first host)"
        )));
    }
    Ok((host, parsed.port().unwrap_or(default_port)))
}

impl MultiHostUrl {
    /// `host:port, host:port` for messages.
    pub fn host_list(&self) -> String {
        self.hosts
            .iter()
            .map(|(host, port)| format!("{host}:{port}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// A `redis://` (or `rediss://`) URL for one host with this URL's credentials, `path` and
    /// `query`, for the client library and for checking the options.
    pub fn single_url(&self, host: &str, port: u16, path: &str, query: Option<&str>) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let userinfo = match &self.userinfo {
            Some(userinfo) => format!("{userinfo}@"),
            None => String::new(),
        };
        let query = match query {
            Some(query) => format!("?{query}"),
            None => String::new(),
        };
        format!("{scheme}://{userinfo}{host}:{port}/{path}{query}")
    }

    /// The URL for showing: the user name kept, a password as `***`, the query as the caller
    /// shows it (`shown_query`, its secrets already masked).
    pub fn display(&self, shown_query: Option<&str>) -> String {
        let userinfo = match self.userinfo.as_deref().map(|u| u.split_once(':')) {
            Some(Some((user, _))) => format!("{user}:***@"),
            Some(None) => format!("{}@", self.userinfo.as_deref().unwrap_or_default()),
            None => String::new(),
        };
        let hosts = self
            .hosts
            .iter()
            .map(|(host, port)| format!("{host}:{port}"))
            .collect::<Vec<_>>()
            .join(",");
        let query = match shown_query {
            Some(query) if !query.is_empty() => format!("?{query}"),
            _ => String::new(),
        };
        format!("{}://{userinfo}{hosts}/{}{query}", self.scheme, self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lists_are_taken_apart() {
        let url = split_hosts("redis-cluster://u:p%40ss@a:7000,b:7001, [::1]:7002/?prefix=x")
            .unwrap()
            .unwrap();
        assert_eq!(url.kind, HostsKind::Cluster);
        assert!(!url.tls);
        assert_eq!(url.userinfo.as_deref(), Some("u:p%40ss"));
        assert_eq!(
            url.hosts,
            [
                ("a".to_owned(), 7000),
                ("b".to_owned(), 7001),
                ("[::1]".to_owned(), 7002)
            ]
        );
        assert_eq!(url.query.as_deref(), Some("prefix=x"));
        assert_eq!(
            url.display(None),
            "redis-cluster://u:***@a:7000,b:7001,[::1]:7002/"
        );
        assert_eq!(
            url.single_url("a", 7000, "", Some("protocol=3")),
            "redis://u:p%40ss@a:7000/?protocol=3"
        );

        let url = split_hosts("rediss-sentinel://s1,s2:26380/mymaster")
            .unwrap()
            .unwrap();
        assert_eq!(url.kind, HostsKind::Sentinel);
        assert!(url.tls);
        assert_eq!(url.hosts[0], ("s1".to_owned(), 26379));
        assert_eq!(url.path, "mymaster");
        assert!(split_hosts("redis://h/").unwrap().is_none());
    }

    #[test]
    fn bad_host_lists_are_refused_without_echo() {
        for url in [
            "redis-cluster://a:1,,b:2/",
            "redis-cluster://a:hunter2x/",
            "redis-cluster://x@a:1,y:hunter2@b:2/",
            "redis-cluster://a:1#hunter2",
            "redis-sentinel:///name",
        ] {
            let err = split_hosts(url).err().unwrap_or_else(|| panic!("{url}"));
            assert_eq!(err.code(), crate::ErrorCode::InvalidArgument, "{url}");
            assert!(!err.message().contains("hunter2"), "{err}");
        }
    }
}
