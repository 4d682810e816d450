//! The upstream Postgres address, parsed from a `postgres://` URL.

use std::fmt;
use std::path::PathBuf;

use super::ConfigError;

/// Where sessions are relayed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub addr: UpstreamAddr,
    /// Database for clients whose startup packet names none.
    pub default_database: Option<String>,
}

/// A TCP host and port, or a Unix socket file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamAddr {
    Tcp {
        host: String,
        port: u16,
    },
    /// The socket file itself (`{dir}/.s.PGSQL.{port}`).
    Unix(PathBuf),
}

impl fmt::Display for UpstreamAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpstreamAddr::Tcp { host, port } => write!(f, "{host}:{port}"),
            UpstreamAddr::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

impl Upstream {
    /// Parses `postgres://[user@]host[:port][/dbname][?host=/socket/dir]`; user and password,
    /// if present, are ignored because each session authenticates as its own client.
    ///
    /// # Errors
    /// Not a URL, another scheme, or no host.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let invalid = |reason: String| ConfigError::Invalid {
            field: "upstream",
            reason,
        };
        let url = url::Url::parse(text)
            .map_err(|e| invalid(format!("{e} (expected postgres://host:port/dbname)")))?;
        if !matches!(url.scheme(), "postgres" | "postgresql") {
            return Err(invalid(format!(
                "scheme {:?} is not postgres://",
                url.scheme()
            )));
        }
        let port = url.port().unwrap_or(5432);
        let query_host = url
            .query_pairs()
            .find(|(k, _)| k == "host")
            .map(|(_, v)| v.into_owned());
        let host = match query_host {
            Some(h) => h,
            None => percent_decode(url.host_str().unwrap_or_default()),
        };
        if host.is_empty() {
            return Err(invalid("no host".into()));
        }
        let addr = if host.starts_with('/') {
            UpstreamAddr::Unix(PathBuf::from(host).join(format!(".s.PGSQL.{port}")))
        } else {
            UpstreamAddr::Tcp {
                host: host.trim_matches(['[', ']']).to_owned(),
                port,
            }
        };
        let db = percent_decode(url.path().trim_start_matches('/'));
        Ok(Self {
            addr,
            default_database: (!db.is_empty()).then_some(db),
        })
    }
}

fn percent_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_and_unix_forms() {
        let u = Upstream::parse("postgres://u:p@db.internal:5433/app").unwrap();
        assert_eq!(
            u.addr,
            UpstreamAddr::Tcp {
                host: "db.internal".into(),
                port: 5433
            }
        );
        assert_eq!(u.default_database.as_deref(), Some("app"));
        let u = Upstream::parse("postgresql://localhost").unwrap();
        assert_eq!(
            u.addr,
            UpstreamAddr::Tcp {
                host: "localhost".into(),
                port: 5432
            }
        );
        assert_eq!(u.default_database, None);
        let u = Upstream::parse("postgres://%2Fvar%2Frun%2Fpostgresql:5432/db").unwrap();
        assert_eq!(
            u.addr,
            UpstreamAddr::Unix("/var/run/postgresql/.s.PGSQL.5432".into())
        );
        let u = Upstream::parse("postgres://localhost:6000/db?host=/tmp/pg").unwrap();
        assert_eq!(u.addr, UpstreamAddr::Unix("/tmp/pg/.s.PGSQL.6000".into()));
        let u = Upstream::parse("postgres://[::1]:5432/db").unwrap();
        assert_eq!(
            u.addr,
            UpstreamAddr::Tcp {
                host: "::1".into(),
                port: 5432
            }
        );
    }

    #[test]
    fn rejects_other_schemes() {
        assert!(Upstream::parse("mysql://localhost/db").is_err());
        assert!(Upstream::parse("localhost:5432").is_err());
    }
}
