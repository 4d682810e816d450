//! Turns an admin call's arguments (literals, or Bind parameters in text or binary format)
//! into typed values, as Postgres would read them for the function's declared types.

use serde_json::Value;

use super::call::{oid, AdminCall, ArgValue};
use super::AdminError;
pub use crate::catalog::inspect::TableRef;

/// One argument, typed.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    Table(TableRef),
    Json(Value),
    Bool(bool),
    Text(String),
    /// Omitted or NULL: the default applies.
    Default,
}

/// One Bind parameter: its bytes (None = NULL), whether binary, and its type OID (0 unknown).
#[derive(Debug, Clone, Copy)]
pub struct Param<'a> {
    pub value: Option<&'a [u8]>,
    pub binary: bool,
    pub type_oid: u32,
}

/// Unknown type (`unknown`, for untyped literals and parameters).
const UNKNOWN: u32 = 705;

/// Types whose text form a parameter may carry for a regclass argument.
const TEXTUAL: [u32; 5] = [
    oid::TEXT,
    1043, /* varchar */
    19,   /* name */
    UNKNOWN,
    0,
];

/// The call's arguments read for its declared parameter types.
///
/// # Errors
/// A parameter that is missing, NULL where a value is required, or not valid for its type.
pub fn resolve(call: &AdminCall, params: &[Param<'_>]) -> Result<Vec<Resolved>, AdminError> {
    let function = call.function.name();
    call.function
        .params()
        .iter()
        .zip(&call.args)
        .map(|(&(name, type_oid, optional), arg)| {
            let resolved = match arg {
                None | Some(ArgValue::Null) => Resolved::Default,
                Some(ArgValue::Literal(text)) => from_text(function, name, type_oid, text)?,
                Some(ArgValue::Bool(b)) if type_oid == oid::BOOL => Resolved::Bool(*b),
                Some(ArgValue::Bool(_)) => {
                    return Err(AdminError::WrongType {
                        function,
                        name,
                        expected: type_name(type_oid),
                    })
                }
                Some(ArgValue::Param(n)) => {
                    let p = params
                        .get(n - 1)
                        .ok_or(AdminError::MissingParameter { number: *n })?;
                    from_param(function, name, type_oid, p)?
                }
            };
            if resolved == Resolved::Default && !optional {
                return Err(AdminError::NullArgument { function, name });
            }
            Ok(resolved)
        })
        .collect()
}

fn from_text(
    function: &'static str,
    name: &'static str,
    type_oid: u32,
    text: &str,
) -> Result<Resolved, AdminError> {
    let invalid = || AdminError::InvalidText {
        type_name: type_name(type_oid),
        value: text.chars().take(80).collect(),
    };
    let _ = (function, name);
    match type_oid {
        oid::REGCLASS => Ok(Resolved::Table(TableRef::Name(text.to_owned()))),
        oid::JSONB => serde_json::from_str(text)
            .map(Resolved::Json)
            .map_err(|_| invalid()),
        oid::BOOL => parse_bool(text).map(Resolved::Bool).ok_or_else(invalid),
        oid::TEXT => Ok(Resolved::Text(text.to_owned())),
        _ => Err(invalid()),
    }
}

fn from_param(
    function: &'static str,
    name: &'static str,
    declared: u32,
    p: &Param<'_>,
) -> Result<Resolved, AdminError> {
    let Some(bytes) = p.value else {
        return Ok(Resolved::Default);
    };
    let bad_binary = || AdminError::BadBinary {
        type_name: type_name(declared),
    };
    if !p.binary {
        let text = std::str::from_utf8(bytes).map_err(|_| bad_binary())?;
        return from_text(function, name, declared, text);
    }
    match (declared, p.type_oid) {
        (oid::REGCLASS, oid::REGCLASS | 26 /* oid */) => {
            let b: [u8; 4] = bytes.try_into().map_err(|_| bad_binary())?;
            Ok(Resolved::Table(TableRef::Oid(u32::from_be_bytes(b))))
        }
        (oid::REGCLASS, t) if TEXTUAL.contains(&t) => Ok(Resolved::Table(TableRef::Name(
            std::str::from_utf8(bytes)
                .map_err(|_| bad_binary())?
                .to_owned(),
        ))),
        (oid::JSONB, oid::JSONB | 0) => match bytes.split_first() {
            Some((1, json)) => serde_json::from_slice(json)
                .map(Resolved::Json)
                .map_err(|_| bad_binary()),
            _ => Err(bad_binary()),
        },
        (oid::JSONB, 114 /* json */) | (oid::JSONB, oid::TEXT) => serde_json::from_slice(bytes)
            .map(Resolved::Json)
            .map_err(|_| bad_binary()),
        (oid::TEXT, t) if TEXTUAL.contains(&t) => Ok(Resolved::Text(
            std::str::from_utf8(bytes)
                .map_err(|_| bad_binary())?
                .to_owned(),
        )),
        (oid::BOOL, oid::BOOL | 0) => match bytes {
            [b] => Ok(Resolved::Bool(*b != 0)),
            _ => Err(bad_binary()),
        },
        _ => Err(AdminError::WrongType {
            function,
            name,
            expected: type_name(declared),
        }),
    }
}

/// Postgres's boolean input syntax.
fn parse_bool(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "t" | "true" | "y" | "yes" | "on" | "1" => Some(true),
        "f" | "false" | "n" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// The SQL name of a parameter type.
pub fn type_name(type_oid: u32) -> &'static str {
    match type_oid {
        oid::REGCLASS => "regclass",
        oid::JSONB => "jsonb",
        oid::BOOL => "boolean",
        _ => "text",
    }
}

/// The types a ParameterDescription reports for the call's `$n`: what the client declared
/// at Parse, else the declared type of the argument the parameter feeds.
pub fn parameter_types(call: &AdminCall, client_types: &[u32]) -> Vec<u32> {
    (1..=call.param_count.max(client_types.len()))
        .map(|n| {
            let declared = call
                .function
                .params()
                .iter()
                .zip(&call.args)
                .find(|(_, a)| **a == Some(ArgValue::Param(n)))
                .map(|((_, t, _), _)| *t)
                .unwrap_or(oid::TEXT);
            match client_types.get(n - 1) {
                Some(&t) if t != 0 => t,
                _ => declared,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::recognize;
    use serde_json::json;

    fn call(sql: &str) -> AdminCall {
        recognize(sql).unwrap().unwrap()
    }

    #[test]
    fn literals_resolve_by_declared_type() {
        let c = call(r#"SELECT coldwire.tier_table('s."Ev"', '{"hot_row_limit": 3}')"#);
        assert_eq!(
            resolve(&c, &[]).unwrap(),
            vec![
                Resolved::Table(TableRef::Name(r#"s."Ev""#.into())),
                Resolved::Json(json!({"hot_row_limit": 3}))
            ]
        );
        let c = call("SELECT coldwire.flush_table('t', wait => 'yes')");
        assert_eq!(resolve(&c, &[]).unwrap()[1], Resolved::Bool(true));
        assert!(matches!(
            resolve(&call("SELECT coldwire.tier_table('t', '{oops')"), &[]),
            Err(AdminError::InvalidText { .. })
        ));
        assert!(matches!(
            resolve(&call("SELECT coldwire.tier_table(NULL)"), &[]),
            Err(AdminError::NullArgument { .. })
        ));
        assert!(matches!(
            resolve(&call("SELECT coldwire.tier_table(true)"), &[]),
            Err(AdminError::WrongType { .. })
        ));
    }

    #[test]
    fn parameters_in_text_and_binary() {
        let c = call("SELECT coldwire.flush_table($1, wait => $2, drain => $3)");
        let oid_bytes = 16384u32.to_be_bytes();
        let params = [
            Param {
                value: Some(&oid_bytes),
                binary: true,
                type_oid: oid::REGCLASS,
            },
            Param {
                value: Some(&[1]),
                binary: true,
                type_oid: oid::BOOL,
            },
            Param {
                value: Some(b"off"),
                binary: false,
                type_oid: 0,
            },
        ];
        assert_eq!(
            resolve(&c, &params).unwrap(),
            vec![
                Resolved::Table(TableRef::Oid(16384)),
                Resolved::Bool(true),
                Resolved::Bool(false)
            ]
        );
        assert!(matches!(
            resolve(&c, &params[..1]),
            Err(AdminError::MissingParameter { number: 2 })
        ));
        let c = call("SELECT coldwire.set_policy($1, $2)");
        let jsonb = [&[1u8][..], br#"{"auto_flush": false}"#].concat();
        let params = [
            Param {
                value: Some(b"events"),
                binary: true,
                type_oid: oid::TEXT,
            },
            Param {
                value: Some(&jsonb),
                binary: true,
                type_oid: oid::JSONB,
            },
        ];
        assert_eq!(
            resolve(&c, &params).unwrap()[1],
            Resolved::Json(json!({"auto_flush": false}))
        );
        assert_eq!(parameter_types(&c, &[]), vec![oid::REGCLASS, oid::JSONB]);
        assert_eq!(
            parameter_types(&c, &[oid::TEXT]),
            vec![oid::TEXT, oid::JSONB]
        );
    }
}
