//! The service connection: coldwire's own session with Postgres for catalog and flush work
//! (DESIGN §9), as opposed to the relayed client sessions.

use tokio_postgres::config::Host;
use tokio_postgres::{Client, Config, NoTls};

use super::error::{postgres_text, CatalogError};

/// Opens the service connection and drives it in a background task.
///
/// Plaintext, like the relay's upstream connections (docs/decisions.md).
///
/// # Errors
/// [`CatalogError::Connect`] when the server is unreachable or refuses the login.
pub async fn connect(config: &Config) -> Result<Client, CatalogError> {
    let (client, connection) = config.connect(NoTls).await.map_err(CatalogError::Connect)?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %postgres_text(&e), "service connection ended with an error");
        }
    });
    Ok(client)
}

/// The database a service connection opens, as Postgres defaults it (the user's name,
/// else `postgres`): the one whose tables coldwire tiers.
pub fn service_database(config: &Config) -> String {
    config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or("postgres")
        .to_owned()
}

/// `user@host:port/dbname` of a service connection, for logs and errors: never the password.
pub fn describe(config: &Config) -> String {
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let name = match host {
                Host::Tcp(name) => name.clone(),
                Host::Unix(dir) => dir.display().to_string(),
            };
            // libpq: one port for every host, or one port per host.
            match ports.get(i).or(ports.first()) {
                Some(port) => format!("{name}:{port}"),
                None => name,
            }
        })
        .collect();
    format!(
        "{}@{}/{}",
        config.get_user().unwrap_or("(default user)"),
        hosts.join(","),
        config.get_dbname().unwrap_or("(default database)")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn description_names_user_host_and_database_but_not_the_password() {
        let c: Config = "postgres://svc:s3cret@db.internal:6543/app"
            .parse()
            .unwrap();
        assert_eq!(describe(&c), "svc@db.internal:6543/app");
        let c: Config = "host=/run/pg,h2 port=5432 user=u password=s3cret dbname=d"
            .parse()
            .unwrap();
        let text = describe(&c);
        assert_eq!(text, "u@/run/pg:5432,h2:5432/d");
        assert!(!text.contains("s3cret"));
    }
}
