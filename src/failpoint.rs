//! Named failpoints for crash and restart tests: `COLDWIRE_FAILPOINT=<name>` makes the
//! process exit abruptly (like SIGKILL: no cleanup) when the flush reaches that point;
//! `COLDWIRE_FAILPOINT=<name>:sleep=<ms>` pauses the flush there instead, every time it
//! passes, so a test can act (restart Postgres, change the policy) while a flush is mid-way.

use std::time::Duration;

/// What an armed failpoint does.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Action {
    Abort,
    Sleep(Duration),
}

/// The failpoint `armed` names and its action; `None` when `armed` is malformed.
fn parse(armed: &str) -> Option<(&str, Action)> {
    match armed.split_once(':') {
        None => Some((armed, Action::Abort)),
        Some((name, action)) => {
            let ms = action.strip_prefix("sleep=")?.parse().ok()?;
            Some((name, Action::Sleep(Duration::from_millis(ms))))
        }
    }
}

/// Exits the process at once, or pauses, if the failpoint `name` is armed.
pub async fn hit(name: &str) {
    let Ok(armed) = std::env::var("COLDWIRE_FAILPOINT") else {
        return;
    };
    match parse(&armed) {
        Some((point, _)) if point != name => {}
        Some((_, Action::Sleep(pause))) => {
            tracing::warn!(
                failpoint = name,
                pause_ms = pause.as_millis() as u64,
                "failpoint reached: sleeping"
            );
            tokio::time::sleep(pause).await;
        }
        Some((_, Action::Abort)) => {
            tracing::error!(failpoint = name, "failpoint reached: exiting");
            std::process::abort();
        }
        // A test that armed a failpoint wrongly must not pass as if it had crashed nowhere.
        None => {
            tracing::error!(
                armed,
                "COLDWIRE_FAILPOINT is not <name> or <name>:sleep=<ms>: exiting"
            );
            std::process::abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_actions() {
        assert_eq!(
            parse("after_publish"),
            Some(("after_publish", Action::Abort))
        );
        assert_eq!(
            parse("before_finalize:sleep=1500"),
            Some((
                "before_finalize",
                Action::Sleep(Duration::from_millis(1500))
            ))
        );
        assert_eq!(parse("before_finalize:sleep="), None);
        assert_eq!(parse("before_finalize:pause=10"), None);
    }
}
