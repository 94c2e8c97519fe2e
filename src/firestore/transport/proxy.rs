//! The HTTP proxy a request goes through, from the environment as other programs read it:
//! `HTTPS_PROXY` (for `https` URLs) or `HTTP_PROXY` (for `http` URLs), else `ALL_PROXY`, each
//! also in lower case; `NO_PROXY` lists hosts to reach directly. Only `http://` proxies are
//! supported (an `https` request goes through a `CONNECT` tunnel, end-to-end TLS inside).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::error::Error;

/// A proxy to send requests through.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Proxy {
    pub host: String,
    pub port: u16,
    /// `Basic …` for `Proxy-Authorization`, when the proxy URL carries a user.
    pub authorization: Option<String>,
}

/// Not `Debug`-derived: the authorization is a secret.
impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Proxy({}:{})", self.host, self.port)
    }
}

/// Reads an environment variable (injectable for tests).
pub(crate) type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The proxy for a request to `host` over `scheme`, as the environment `env` says; `None` for
/// a direct connection (no proxy set, `NO_PROXY` names the host, or the host is this machine,
/// which no proxy could reach).
pub(crate) fn from_env(scheme: &str, host: &str, env: Env<'_>) -> Result<Option<Proxy>, Error> {
    let get = |name: &str| {
        env(name)
            .or_else(|| env(&name.to_ascii_lowercase()))
            .filter(|value| !value.trim().is_empty())
    };
    let specific = if scheme == "https" {
        "HTTPS_PROXY"
    } else {
        "HTTP_PROXY"
    };
    let Some(url) = get(specific).or_else(|| get("ALL_PROXY")) else {
        return Ok(None);
    };
    if is_this_machine(host) || no_proxy_names(get("NO_PROXY").as_deref(), host) {
        return Ok(None);
    }
    parse(&url).map(Some)
}

/// A proxy URL: `http://[user[:password]@]host[:port]` (the scheme may be left out; port 80
/// by default).
fn parse(url: &str) -> Result<Proxy, Error> {
    let with_scheme = if url.contains("://") {
        url.to_owned()
    } else {
        format!("http://{url}")
    };
    // The message never quotes the URL: it may carry a password.
    let bad = |why: &str| Error::BadRequest(format!("the proxy set in the environment {why}"));
    let parsed = url::Url::parse(&with_scheme).map_err(|_| bad("is not a valid URL"))?;
    if parsed.scheme() != "http" {
        return Err(bad("is not an http:// proxy (the only kind supported)"));
    }
    let host = parsed
        .host_str()
        .filter(|host| !host.is_empty())
        .ok_or_else(|| bad("names no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let authorization = (!parsed.username().is_empty()).then(|| {
        let decode = |text: &str| {
            percent_encoding::percent_decode_str(text)
                .decode_utf8_lossy()
                .into_owned()
        };
        let user = decode(parsed.username());
        let password = decode(parsed.password().unwrap_or(""));
        format!("Basic {}", STANDARD.encode(format!("{user}:{password}")))
    });
    Ok(Proxy {
        host,
        port: parsed.port().unwrap_or(80),
        authorization,
    })
}

/// Whether `host` is this machine (`localhost` or a loopback address).
fn is_this_machine(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether `NO_PROXY` (a comma-separated list of host names, domain suffixes and addresses,
/// or `*`) names `host`.
fn no_proxy_names(no_proxy: Option<&str>, host: &str) -> bool {
    let Some(list) = no_proxy else {
        return false;
    };
    let host = host.to_ascii_lowercase();
    list.split(',')
        .map(|entry| entry.trim().to_ascii_lowercase())
        .filter(|entry| !entry.is_empty())
        .any(|entry| {
            // An entry may carry a port, which this check does not distinguish.
            let entry = match entry.rsplit_once(':') {
                Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name.to_owned(),
                _ => entry,
            };
            let suffix = entry.trim_start_matches("*.").trim_start_matches('.');
            entry == "*" || host == suffix || host.ends_with(&format!(".{suffix}"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn the_environment_chooses_the_proxy() {
        let https = env(&[("HTTPS_PROXY", "http://u:p%40ss@proxy.corp:3128")]);
        let proxy = from_env("https", "firestore.googleapis.com", &https)
            .unwrap()
            .unwrap();
        assert_eq!((proxy.host.as_str(), proxy.port), ("proxy.corp", 3128));
        assert_eq!(
            proxy.authorization.as_deref(),
            Some(format!("Basic {}", STANDARD.encode("u:p@ss")).as_str())
        );
        assert!(!format!("{proxy:?}").contains("Basic"));
        assert_eq!(from_env("http", "example.com", &https).unwrap(), None);
        assert_eq!(from_env("https", "127.0.0.1", &https).unwrap(), None);
        assert_eq!(from_env("https", "localhost", &https).unwrap(), None);

        let all = env(&[
            ("all_proxy", "proxy:8080"),
            ("no_proxy", "internal.corp, .svc,10.0.0.1"),
        ]);
        let proxy = from_env("http", "example.com", &all).unwrap().unwrap();
        assert_eq!((proxy.host.as_str(), proxy.port), ("proxy", 8080));
        for direct in ["internal.corp", "a.internal.corp", "x.svc", "10.0.0.1"] {
            assert_eq!(from_env("https", direct, &all).unwrap(), None, "{direct}");
        }
        assert!(
            from_env("https", "notinternal.corp", &all)
                .unwrap()
                .is_some()
        );
        let star = env(&[("HTTPS_PROXY", "http://p:1"), ("NO_PROXY", "*")]);
        assert_eq!(from_env("https", "example.com", &star).unwrap(), None);
        assert_eq!(from_env("https", "example.com", &env(&[])).unwrap(), None);
    }

    #[test]
    fn unusable_proxies_are_refused_without_quoting_them() {
        for url in ["socks5://u:secret@p:1", "http://", "https://u:secret@p:1"] {
            let err = parse(url).unwrap_err();
            assert!(matches!(err, Error::BadRequest(_)), "{url}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
    }
}
