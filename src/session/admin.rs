//! Admin calls inside a session: which client messages coldwire answers itself (those that
//! name an admin call, or a statement or portal made from one) and what it answers.
//!
//! coldwire answers only where its answer lands in protocol order: a simple Query, or an
//! extended-protocol group whose messages so far were all coldwire's to answer. An admin
//! call after other messages in the same Sync group is relayed to Postgres, whose stub
//! function then refuses it with a hint.

use std::collections::HashMap;

use bytes::BytesMut;

use crate::admin::args::{self, Param, Resolved};
use crate::admin::call::{mentions_coldwire, recognize, AdminCall};
use crate::admin::AdminError;
use crate::wire::extended::{self as ext, Bind, Parse, Target};
use crate::wire::messages as msg;
use crate::wire::WireError;

/// What to do with one client message.
#[derive(Debug)]
pub enum Disposition {
    /// Relay it upstream unchanged.
    Forward,
    /// Swallow it: the group is being skipped after an admin error, until Sync.
    Drop,
    /// coldwire answers it.
    Answer(Answer),
}

/// coldwire's answer to one message.
#[derive(Debug)]
pub enum Answer {
    /// These bytes, as they are (ParseComplete, descriptions, CloseComplete, …).
    Bytes(BytesMut),
    /// The call failed or was refused before running.
    Fail { error: AdminError, simple: bool },
    /// Run the call; answer DataRow and CommandComplete (with RowDescription before and
    /// ReadyForQuery after, for a simple Query).
    Run {
        call: AdminCall,
        args: Vec<Resolved>,
        /// Bind's result format codes (binary or not).
        formats: Vec<bool>,
        simple: bool,
    },
}

#[derive(Debug)]
struct Prepared {
    call: AdminCall,
    param_types: Vec<u32>,
}

#[derive(Debug)]
struct Bound {
    call: AdminCall,
    args: Result<Vec<Resolved>, AdminError>,
    formats: Vec<bool>,
}

/// Per-session admin state.
#[derive(Debug, Default)]
pub struct AdminSession {
    statements: HashMap<String, Prepared>,
    portals: HashMap<String, Bound>,
    /// coldwire answered messages of the current Sync group.
    in_group: bool,
    /// An admin error occurred in this group: drop messages until Sync, as Postgres does.
    skipping: bool,
}

impl AdminSession {
    /// Whether Bind, Describe, Execute and Flush must be inspected (some statement or portal
    /// is coldwire's, or a group is being skipped).
    pub fn needs_extended_inspection(&self) -> bool {
        self.skipping || !self.statements.is_empty() || !self.portals.is_empty()
    }

    /// Decides what to do with a whole client frame. `dirty` says whether anything went
    /// upstream since the last Sync, in which case coldwire cannot answer in order.
    ///
    /// # Errors
    /// A malformed frame of a type coldwire had to decode.
    pub fn on_frame(
        &mut self,
        tag: u8,
        frame: &[u8],
        dirty: bool,
    ) -> Result<Disposition, WireError> {
        if self.skipping {
            return Ok(match tag {
                msg::SYNC => {
                    self.end_group();
                    Disposition::Forward
                }
                msg::TERMINATE => Disposition::Forward,
                _ => Disposition::Drop,
            });
        }
        let can_answer = self.in_group || !dirty;
        match tag {
            msg::QUERY => self.on_query(frame, dirty),
            msg::PARSE => self.on_parse(frame, can_answer),
            msg::BIND if self.needs_extended_inspection() => self.on_bind(frame, can_answer),
            msg::DESCRIBE if self.needs_extended_inspection() => {
                self.on_describe(frame, can_answer)
            }
            msg::EXECUTE if self.needs_extended_inspection() => self.on_execute(frame, can_answer),
            msg::CLOSE => self.on_close(frame, can_answer),
            msg::SYNC => {
                self.end_group();
                Ok(Disposition::Forward)
            }
            _ => Ok(Disposition::Forward),
        }
    }

    /// A simple Query: answered when it is an admin call alone, before anything else of a
    /// group went upstream.
    fn on_query(&mut self, frame: &[u8], dirty: bool) -> Result<Disposition, WireError> {
        let sql = frame
            .get(5..frame.len().saturating_sub(1))
            .unwrap_or_default();
        if !mentions_coldwire(sql) || dirty {
            return Ok(Disposition::Forward);
        }
        // Text in another client_encoding holds no call coldwire can answer.
        let Ok(sql) = std::str::from_utf8(sql) else {
            return Ok(Disposition::Forward);
        };
        Ok(match recognize(sql) {
            Ok(None) => Disposition::Forward,
            Ok(Some(call)) => match args::resolve(&call, &[]) {
                Ok(args) => Disposition::Answer(Answer::Run {
                    call,
                    args,
                    formats: Vec::new(),
                    simple: true,
                }),
                Err(error) => Disposition::Answer(Answer::Fail {
                    error,
                    simple: true,
                }),
            },
            Err(error) => Disposition::Answer(Answer::Fail {
                error,
                simple: true,
            }),
        })
    }

    /// A Parse: an admin call's is answered (ParseComplete) and remembered by statement name.
    fn on_parse(&mut self, frame: &[u8], can_answer: bool) -> Result<Disposition, WireError> {
        let parse = match Parse::decode(frame) {
            Ok(parse) => parse,
            // A query in another client_encoding: no call coldwire can answer.
            Err(e) => {
                Parse::decode_raw(frame).map_err(|_| e)?;
                return Ok(Disposition::Forward);
            }
        };
        let recognized = if mentions_coldwire(parse.query.as_bytes()) {
            recognize(parse.query)
        } else {
            Ok(None)
        };
        match recognized {
            Ok(Some(call)) if can_answer => {
                self.in_group = true;
                let param_types = parse.param_types.clone();
                self.statements
                    .insert(parse.statement.to_owned(), Prepared { call, param_types });
                Ok(Disposition::Answer(Answer::Bytes(BytesMut::from(
                    &ext::empty(msg::PARSE_COMPLETE)[..],
                ))))
            }
            Err(error) if can_answer => Ok(self.fail(error)),
            _ => {
                // The client (re)defines this name with SQL Postgres will see.
                self.statements.remove(parse.statement);
                Ok(Disposition::Forward)
            }
        }
    }

    /// A Bind of an admin statement: its arguments resolved, the portal remembered.
    fn on_bind(&mut self, frame: &[u8], can_answer: bool) -> Result<Disposition, WireError> {
        let bind = Bind::decode(frame)?;
        let Some(prepared) = self.statements.get(bind.statement) else {
            self.portals.remove(bind.portal);
            return Ok(Disposition::Forward);
        };
        if !can_answer {
            return Ok(Disposition::Forward);
        }
        let types = args::parameter_types(&prepared.call, &prepared.param_types);
        let params: Vec<Param<'_>> = bind
            .params
            .iter()
            .enumerate()
            .map(|(i, value)| Param {
                value: *value,
                binary: bind.is_binary(i),
                type_oid: types.get(i).copied().unwrap_or(0),
            })
            .collect();
        let bound = Bound {
            call: prepared.call.clone(),
            args: args::resolve(&prepared.call, &params),
            formats: bind.result_binary.clone(),
        };
        self.portals.insert(bind.portal.to_owned(), bound);
        self.in_group = true;
        Ok(Disposition::Answer(Answer::Bytes(BytesMut::from(
            &ext::empty(msg::BIND_COMPLETE)[..],
        ))))
    }

    /// A Describe of an admin statement or portal: its descriptions.
    fn on_describe(&mut self, frame: &[u8], can_answer: bool) -> Result<Disposition, WireError> {
        let mut out = BytesMut::new();
        match ext::target(frame, msg::DESCRIBE)? {
            Target::Statement(name) => match self.statements.get(name) {
                Some(p) if can_answer => {
                    ext::parameter_description(
                        &mut out,
                        &args::parameter_types(&p.call, &p.param_types),
                    );
                    crate::admin::answer::row_description(&mut out, &p.call, &[]);
                }
                _ => return Ok(Disposition::Forward),
            },
            Target::Portal(name) => match self.portals.get(name) {
                Some(b) if can_answer => {
                    crate::admin::answer::row_description(&mut out, &b.call, &b.formats)
                }
                _ => return Ok(Disposition::Forward),
            },
        }
        self.in_group = true;
        Ok(Disposition::Answer(Answer::Bytes(out)))
    }

    /// An Execute of an admin portal: the call is run (or its argument error reported).
    fn on_execute(&mut self, frame: &[u8], can_answer: bool) -> Result<Disposition, WireError> {
        let portal = ext::execute_portal(frame)?;
        match self.portals.get(portal) {
            Some(bound) if can_answer => {
                self.in_group = true;
                Ok(Disposition::Answer(match &bound.args {
                    Ok(args) => Answer::Run {
                        call: bound.call.clone(),
                        args: args.clone(),
                        formats: bound.formats.clone(),
                        simple: false,
                    },
                    Err(error) => {
                        self.skipping = true;
                        Answer::Fail {
                            error: error.clone(),
                            simple: false,
                        }
                    }
                }))
            }
            _ => Ok(Disposition::Forward),
        }
    }

    /// A Close of an admin statement or portal: forgotten, and CloseComplete.
    fn on_close(&mut self, frame: &[u8], can_answer: bool) -> Result<Disposition, WireError> {
        let removed = match ext::target(frame, msg::CLOSE)? {
            Target::Statement(name) => self.statements.remove(name).is_some(),
            Target::Portal(name) => self.portals.remove(name).is_some(),
        };
        if removed && can_answer {
            self.in_group = true;
            Ok(Disposition::Answer(Answer::Bytes(BytesMut::from(
                &ext::empty(msg::CLOSE_COMPLETE)[..],
            ))))
        } else {
            Ok(Disposition::Forward)
        }
    }

    /// An extended-protocol answer failed at run time: skip the rest of the group.
    pub fn failed(&mut self) {
        self.skipping = true;
    }

    fn fail(&mut self, error: AdminError) -> Disposition {
        self.in_group = true;
        self.skipping = true;
        Disposition::Answer(Answer::Fail {
            error,
            simple: false,
        })
    }

    /// A Sync ends the group; the unnamed portal does not outlive it.
    fn end_group(&mut self) {
        self.in_group = false;
        self.skipping = false;
        self.portals.remove("");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::wire::test_frame as frame;
    fn parse(name: &str, sql: &str) -> Vec<u8> {
        frame(
            b'P',
            &[name.as_bytes(), b"\0", sql.as_bytes(), b"\0\0\0"].concat(),
        )
    }
    fn bind(portal: &str, stmt: &str, params: &[&str]) -> Vec<u8> {
        let mut b = [portal.as_bytes(), b"\0", stmt.as_bytes(), b"\0\0\0"].concat();
        b.extend_from_slice(&(params.len() as i16).to_be_bytes());
        for p in params {
            b.extend_from_slice(&(p.len() as i32).to_be_bytes());
            b.extend_from_slice(p.as_bytes());
        }
        b.extend_from_slice(&[0, 0]);
        frame(b'B', &b)
    }
    fn tag_of(d: &Disposition) -> String {
        match d {
            Disposition::Forward => "fwd".into(),
            Disposition::Drop => "drop".into(),
            Disposition::Answer(Answer::Bytes(b)) => String::from_utf8_lossy(&[b[0]]).into_owned(),
            Disposition::Answer(Answer::Fail { .. }) => "fail".into(),
            Disposition::Answer(Answer::Run { .. }) => "run".into(),
        }
    }

    #[test]
    fn an_extended_group_is_answered_message_by_message() {
        let mut s = AdminSession::default();
        let steps = [
            parse("", "SELECT coldwire.flush_table($1, wait => true)"),
            bind("", "", &["events"]),
            frame(b'D', b"P\0"),
            frame(b'E', b"\0\0\0\0\0"),
            frame(b'S', b""),
        ];
        let got: Vec<String> = steps
            .iter()
            .map(|f| tag_of(&s.on_frame(f[0], f, false).unwrap()))
            .collect();
        assert_eq!(got, ["1", "2", "T", "run", "fwd"]);
        assert!(!s.needs_extended_inspection() || s.statements.contains_key(""));
    }

    #[test]
    fn other_statements_pass_and_clear_shadowed_names() {
        let mut s = AdminSession::default();
        assert_eq!(
            tag_of(
                &s.on_frame(b'P', &parse("s", "SELECT coldwire.tier_table('t')"), false)
                    .unwrap()
            ),
            "1"
        );
        assert_eq!(
            tag_of(&s.on_frame(b'S', &frame(b'S', b""), false).unwrap()),
            "fwd"
        );
        assert!(s.needs_extended_inspection());
        assert_eq!(
            tag_of(&s.on_frame(b'D', &frame(b'D', b"Ss\0"), false).unwrap()),
            "t"
        );
        assert_eq!(
            tag_of(&s.on_frame(b'P', &parse("s", "SELECT 1"), false).unwrap()),
            "fwd"
        );
        assert_eq!(
            tag_of(&s.on_frame(b'D', &frame(b'D', b"Ss\0"), false).unwrap()),
            "fwd"
        );
        assert_eq!(
            tag_of(
                &s.on_frame(b'Q', &frame(b'Q', b"SELECT 1\0"), false)
                    .unwrap()
            ),
            "fwd"
        );
    }

    #[test]
    fn errors_skip_to_sync_and_dirty_groups_are_relayed() {
        let mut s = AdminSession::default();
        assert_eq!(
            tag_of(
                &s.on_frame(
                    b'P',
                    &parse("", "SELECT coldwire.tier_table(x) FROM y"),
                    false
                )
                .unwrap()
            ),
            "fail"
        );
        assert_eq!(
            tag_of(&s.on_frame(b'B', &bind("", "", &[]), false).unwrap()),
            "drop"
        );
        assert_eq!(
            tag_of(&s.on_frame(b'S', &frame(b'S', b""), false).unwrap()),
            "fwd"
        );
        // After other messages went upstream in this group, coldwire cannot answer in order.
        assert_eq!(
            tag_of(
                &s.on_frame(b'P', &parse("", "SELECT coldwire.tier_table('t')"), true)
                    .unwrap()
            ),
            "fwd"
        );
        let q = frame(b'Q', b"SELECT coldwire.tier_table('t')\0");
        assert_eq!(tag_of(&s.on_frame(b'Q', &q, true).unwrap()), "fwd");
        assert_eq!(tag_of(&s.on_frame(b'Q', &q, false).unwrap()), "run");
        let bad = frame(b'Q', b"SELECT coldwire.set_policy('t', '{x')\0");
        assert_eq!(tag_of(&s.on_frame(b'Q', &bad, false).unwrap()), "fail");
    }
}
