//! Conjunct extraction for cold planning (DESIGN §6.3): from the WHERE clause of the
//! query block that reads a tiered table, the top-level AND-ed comparisons of one of its
//! columns with a constant that the cold planner can prune by. Anything else is ignored:
//! pruning only ever over-selects, Postgres re-applies the whole query (invariant 7).
//!
//! Understood: `col op const` and `const op col` with `=, <>, !=, <, <=, >, >=`,
//! `col [NOT] IN (…)`, `col [NOT] BETWEEN a AND b`, `col IS [NOT] NULL`, a boolean column
//! alone and its `IS [NOT] TRUE|FALSE|UNKNOWN` tests, and OR and NOT of these (negations
//! pushed down to the comparisons, a disjunction one [`Comparison::Any`]), with the column
//! qualified by the reference's alias (or name), or unqualified when the reference is the
//! block's only relation; [`complete_conjuncts_of`] also tells whether all of a condition
//! was understood. References on the nullable side of an outer join get no predicates (a
//! pruned row would turn into a NULL-extended one). Constants become the order-preserving
//! encoding only where that encoding is the comparison's order: integers and float8 (also
//! from quoted literals); text, varchar, uuid and bool for (in)equality (byte equality is
//! text equality under deterministic collations), and text and varchar in order only
//! where the column compares as bytes (`SegmentColumn::byte_ordered`: the C collation);
//! dates and timestamps from strict ISO literals only
//! ([`crate::values::literal`]: nothing whose meaning depends on DateStyle, and a
//! timestamptz without an offset only in a UTC session). Parameters (`$n`) stand for their Bind values
//! ([`super::params::BoundParams`]), decoded only where their type is certain.

use pg_query::protobuf::{
    a_const, node::Node as N, AExprKind, BoolExprType, BoolTestType, JoinType, Node, NullTestType,
    SelectStmt,
};
use pg_query::NodeRef;

use super::params::{BoundParams, Constant};
use crate::segment::prune::{extend_keys, Predicate};
use crate::segment::writer::SegmentColumn;
use crate::values::literal::{temporal_literal, TemporalKind};
use crate::values::numeric::{self, Scaled};
use crate::values::ordered;
use crate::values::{ColdType, NumericRepr, ScalarType, TextKind};

/// What a conjunct says about a column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Comparison {
    Eq(Constant),
    /// `<>`, `!=`, `NOT (x = c)`.
    NotEq(Constant),
    Below(Constant, bool),
    Above(Constant, bool),
    In(Vec<Constant>),
    IsNull,
    IsNotNull,
    /// A disjunction of conjunctions, on any of the reference's columns (the predicate's
    /// own `column` is empty): `a = 1 OR (b > 2 AND c IS NULL)`.
    Any(Vec<Vec<ColumnPredicate>>),
}

impl std::fmt::Display for ColumnPredicate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.column;
        match &self.comparison {
            Comparison::Eq(v) => write!(f, "{c} = {v}"),
            Comparison::NotEq(v) => write!(f, "{c} <> {v}"),
            Comparison::Any(any) => {
                let all: Vec<String> = any
                    .iter()
                    .map(|all| {
                        let parts: Vec<String> = all.iter().map(ToString::to_string).collect();
                        match parts.as_slice() {
                            [one] => one.clone(),
                            _ => format!("({})", parts.join(" AND ")),
                        }
                    })
                    .collect();
                write!(f, "({})", all.join(" OR "))
            }
            Comparison::Below(v, true) => write!(f, "{c} <= {v}"),
            Comparison::Below(v, false) => write!(f, "{c} < {v}"),
            Comparison::Above(v, true) => write!(f, "{c} >= {v}"),
            Comparison::Above(v, false) => write!(f, "{c} > {v}"),
            Comparison::In(vs) => {
                let list: Vec<String> = vs.iter().map(ToString::to_string).collect();
                write!(f, "{c} IN ({})", list.join(", "))
            }
            Comparison::IsNull => write!(f, "{c} IS NULL"),
            Comparison::IsNotNull => write!(f, "{c} IS NOT NULL"),
        }
    }
}

/// A conjunct on one column of the reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnPredicate {
    pub column: String,
    pub comparison: Comparison,
}

/// The conjuncts constraining the reference at `location` (a RangeVar's location in
/// `parsed`) whose alias, or name when it has none, is `name`.
pub fn extract(parsed: &pg_query::ParseResult, location: i32, name: &str) -> Vec<ColumnPredicate> {
    for (node, ..) in parsed.protobuf.nodes() {
        let NodeRef::SelectStmt(select) = node else {
            continue;
        };
        let mut relations = 0;
        let mut found = None;
        for item in &select.from_clause {
            visit_from(item, false, &mut relations, &mut |rv_location, nullable| {
                if rv_location == location {
                    found = Some(nullable);
                }
            });
        }
        match found {
            Some(false) => return conjuncts(select, name, relations == 1),
            Some(true) => return Vec::new(),
            None => {}
        }
    }
    Vec::new()
}

/// Calls `seen(location, nullable)` for every relation of a FROM item outside subqueries.
fn visit_from(
    node: &Node,
    nullable: bool,
    relations: &mut usize,
    seen: &mut impl FnMut(i32, bool),
) {
    match node.node.as_ref() {
        Some(N::RangeVar(rv)) => {
            *relations += 1;
            seen(rv.location, nullable);
        }
        Some(N::JoinExpr(j)) => {
            let kind = JoinType::try_from(j.jointype).unwrap_or(JoinType::Undefined);
            let (left_nullable, right_nullable) = match kind {
                JoinType::JoinInner => (false, false),
                JoinType::JoinLeft => (false, true),
                JoinType::JoinRight => (true, false),
                _ => (true, true),
            };
            if let Some(l) = &j.larg {
                visit_from(l, nullable || left_nullable, relations, seen);
            }
            if let Some(r) = &j.rarg {
                visit_from(r, nullable || right_nullable, relations, seen);
            }
        }
        _ => *relations += 1,
    }
}

fn conjuncts(select: &SelectStmt, name: &str, only_relation: bool) -> Vec<ColumnPredicate> {
    select
        .where_clause
        .as_deref()
        .map(|w| conjuncts_of(w, name, only_relation))
        .unwrap_or_default()
}

/// The top-level AND-ed conjuncts of `condition` on the columns of the relation called
/// `name` (columns may be unqualified when it is the only relation in scope).
pub fn conjuncts_of(condition: &Node, name: &str, only_relation: bool) -> Vec<ColumnPredicate> {
    complete_conjuncts_of(condition, name, only_relation).0
}

/// [`conjuncts_of`], and whether they say all of `condition`: no part of it was left out
/// (a disjunction or negation whose every part is understood counts as one conjunct).
pub fn complete_conjuncts_of(
    condition: &Node,
    name: &str,
    only_relation: bool,
) -> (Vec<ColumnPredicate>, bool) {
    let mut out = Vec::new();
    let reader = Reader {
        name,
        only_relation,
    };
    let complete = reader.collect(condition, false, &mut out);
    (out, complete)
}

/// Reads conditions on the columns of one reference.
struct Reader<'a> {
    name: &'a str,
    only_relation: bool,
}

impl Reader<'_> {
    fn column(&self, node: &Node) -> Option<String> {
        column_of(node, self.name, self.only_relation)
    }

    /// Appends to `out` conjuncts implied by `node` (by `NOT node` when `negated`);
    /// returns whether they say all of it.
    fn collect(&self, node: &Node, negated: bool, out: &mut Vec<ColumnPredicate>) -> bool {
        let mut push = |column: String, comparison: Comparison| {
            out.push(ColumnPredicate { column, comparison });
            true
        };
        match node.node.as_ref() {
            Some(N::BoolExpr(b)) => {
                let op = BoolExprType::try_from(b.boolop).unwrap_or(BoolExprType::Undefined);
                match (op, negated) {
                    (BoolExprType::NotExpr, _) => match b.args.as_slice() {
                        [arg] => self.collect(arg, !negated, out),
                        _ => false,
                    },
                    // A AND B; NOT (A OR B) is NOT A AND NOT B.
                    (BoolExprType::AndExpr, false) | (BoolExprType::OrExpr, true) => {
                        let mut complete = true;
                        for arg in &b.args {
                            complete &= self.collect(arg, negated, out);
                        }
                        complete
                    }
                    // A OR B; NOT (A AND B) is NOT A OR NOT B. A part that says nothing
                    // leaves the whole without a condition.
                    (BoolExprType::AndExpr, true) | (BoolExprType::OrExpr, false) => {
                        let mut any = Vec::with_capacity(b.args.len());
                        let mut complete = true;
                        for arg in &b.args {
                            let mut all = Vec::new();
                            complete &= self.collect(arg, negated, &mut all);
                            if all.is_empty() {
                                return false;
                            }
                            any.push(all);
                        }
                        push(String::new(), Comparison::Any(any)) && complete
                    }
                    _ => false,
                }
            }
            Some(N::NullTest(t)) => {
                let Some(col) = t.arg.as_deref().and_then(|a| self.column(a)) else {
                    return false;
                };
                let is_null = (t.nulltesttype == NullTestType::IsNull as i32) != negated;
                push(
                    col,
                    if is_null {
                        Comparison::IsNull
                    } else {
                        Comparison::IsNotNull
                    },
                )
            }
            Some(N::BooleanTest(t)) => {
                let Some(col) = t.arg.as_deref().and_then(|a| self.column(a)) else {
                    return false;
                };
                let test =
                    BoolTestType::try_from(t.booltesttype).unwrap_or(BoolTestType::Undefined);
                // Each test and its negation: IS TRUE / IS NOT TRUE, …
                let (test, negated) = match test {
                    BoolTestType::IsNotTrue => (BoolTestType::IsTrue, !negated),
                    BoolTestType::IsNotFalse => (BoolTestType::IsFalse, !negated),
                    BoolTestType::IsNotUnknown => (BoolTestType::IsUnknown, !negated),
                    other => (other, negated),
                };
                let value = |v: bool| ColumnPredicate {
                    column: col.clone(),
                    comparison: Comparison::Eq(Constant::Bool(v)),
                };
                let null = ColumnPredicate {
                    column: col.clone(),
                    comparison: Comparison::IsNull,
                };
                let comparison = match (test, negated) {
                    (BoolTestType::IsTrue, false) => Comparison::Eq(Constant::Bool(true)),
                    (BoolTestType::IsFalse, false) => Comparison::Eq(Constant::Bool(false)),
                    (BoolTestType::IsTrue, true) => {
                        Comparison::Any(vec![vec![value(false)], vec![null]])
                    }
                    (BoolTestType::IsFalse, true) => {
                        Comparison::Any(vec![vec![value(true)], vec![null]])
                    }
                    (BoolTestType::IsUnknown, false) => Comparison::IsNull,
                    (BoolTestType::IsUnknown, true) => Comparison::IsNotNull,
                    _ => return false,
                };
                let column = if matches!(comparison, Comparison::Any(_)) {
                    String::new()
                } else {
                    col.clone()
                };
                push(column, comparison)
            }
            // A boolean column on its own: `WHERE is_bot`, `WHERE NOT is_bot`.
            Some(N::ColumnRef(_)) => match self.column(node) {
                Some(col) => push(col, Comparison::Eq(Constant::Bool(!negated))),
                None => false,
            },
            Some(N::AExpr(e)) => self.comparison(e, negated, out),
            _ => false,
        }
    }

    /// [`Reader::collect`] of a comparison, `IN` or `BETWEEN`.
    fn comparison(
        &self,
        e: &pg_query::protobuf::AExpr,
        negated: bool,
        out: &mut Vec<ColumnPredicate>,
    ) -> bool {
        let (Some(l), Some(r)) = (e.lexpr.as_deref(), e.rexpr.as_deref()) else {
            return false;
        };
        let kind = AExprKind::try_from(e.kind).unwrap_or(AExprKind::Undefined);
        let mut push = |column: String, comparison: Comparison| {
            out.push(ColumnPredicate { column, comparison });
            true
        };
        match kind {
            AExprKind::AexprOp => {
                let Some(op) = operator(&e.name) else {
                    return false;
                };
                let (col, value, flipped) =
                    match (self.column(l), constant(r), self.column(r), constant(l)) {
                        (Some(c), Some(v), ..) => (c, v, false),
                        (_, _, Some(c), Some(v)) => (c, v, true),
                        _ => return false,
                    };
                let op = if flipped { flip(op) } else { op };
                // NOT (a < c) is a >= c for every type coldwire compares by order (NULL
                // satisfies neither), and so on.
                let op = if negated { negate(op) } else { Some(op) };
                let comparison = match op {
                    Some("=") => Comparison::Eq(value),
                    Some("<>" | "!=") => Comparison::NotEq(value),
                    Some("<") => Comparison::Below(value, false),
                    Some("<=") => Comparison::Below(value, true),
                    Some(">") => Comparison::Above(value, false),
                    Some(">=") => Comparison::Above(value, true),
                    _ => return false,
                };
                push(col, comparison)
            }
            // `a IN (…)`, and `a NOT IN (…)` (`<>` each: a NULL in the list has no
            // constant, so never reaches here).
            AExprKind::AexprIn => {
                let (Some(col), Some(N::List(list))) = (self.column(l), r.node.as_ref()) else {
                    return false;
                };
                let Some(values) = list.items.iter().map(constant).collect::<Option<Vec<_>>>()
                else {
                    return false;
                };
                match (operator(&e.name), negated) {
                    (Some("="), false) | (Some("<>"), true) => push(col, Comparison::In(values)),
                    (Some("="), true) | (Some("<>"), false) => {
                        for v in values {
                            push(col.clone(), Comparison::NotEq(v));
                        }
                        true
                    }
                    _ => false,
                }
            }
            AExprKind::AexprBetween | AExprKind::AexprNotBetween => {
                let negated = negated != (kind == AExprKind::AexprNotBetween);
                let (Some(col), Some(N::List(list))) = (self.column(l), r.node.as_ref()) else {
                    return false;
                };
                let [low, high] = list.items.as_slice() else {
                    return false;
                };
                let (Some(low), Some(high)) = (constant(low), constant(high)) else {
                    return false;
                };
                if negated {
                    let outside = vec![
                        vec![ColumnPredicate {
                            column: col.clone(),
                            comparison: Comparison::Below(low, false),
                        }],
                        vec![ColumnPredicate {
                            column: col,
                            comparison: Comparison::Above(high, false),
                        }],
                    ];
                    return push(String::new(), Comparison::Any(outside));
                }
                push(col.clone(), Comparison::Above(low, true));
                push(col, Comparison::Below(high, true))
            }
            _ => false,
        }
    }
}

/// The operator `NOT (a op c)` is `a negate(op) c` with.
fn negate(op: &str) -> Option<&'static str> {
    Some(match op {
        "=" => "<>",
        "<>" | "!=" => "=",
        "<" => ">=",
        "<=" => ">",
        ">" => "<=",
        ">=" => "<",
        _ => return None,
    })
}

pub(crate) fn operator(name: &[Node]) -> Option<&str> {
    match name {
        [only] => match only.node.as_ref() {
            Some(N::String(s)) => Some(s.sval.as_str()),
            _ => None,
        },
        _ => None,
    }
}

fn flip(op: &str) -> &str {
    match op {
        "<" => ">",
        "<=" => ">=",
        ">" => "<",
        ">=" => "<=",
        other => other,
    }
}

/// The column a ColumnRef names, if it is one of the reference's.
pub(crate) fn column_of(node: &Node, name: &str, only_relation: bool) -> Option<String> {
    let Some(N::ColumnRef(c)) = node.node.as_ref() else {
        return None;
    };
    let parts: Vec<&str> = c
        .fields
        .iter()
        .map(|f| match f.node.as_ref() {
            Some(N::String(s)) => Some(s.sval.as_str()),
            _ => None,
        })
        .collect::<Option<_>>()?;
    match parts.as_slice() {
        [col] if only_relation => Some((*col).to_owned()),
        [qualifier, col] if *qualifier == name => Some((*col).to_owned()),
        _ => None,
    }
}

/// A literal constant (integers, strings), a parameter, or an integer sum of those, maybe
/// cast to an integer, text or uuid type; other expressions are not looked into.
pub fn constant(node: &Node) -> Option<Constant> {
    match node.node.as_ref() {
        // `$1::int8`, `'5'::bigint`, `'…'::uuid`: a cast to the type the key has anyway
        // (segments compare the value as that type).
        Some(N::TypeCast(c)) => {
            let ty = c.type_name.as_ref()?;
            let Some(N::String(name)) = ty.names.last()?.node.as_ref() else {
                return None;
            };
            // `DATE '…'`, `'…'::timestamptz`: the literal read as that type, which must
            // then be the column's (a date compared with a timestamp compares as
            // timestamps).
            let temporal = match name.sval.as_str() {
                "date" => Some(ScalarType::Date),
                "timestamp" => Some(ScalarType::Timestamp),
                "timestamptz" => Some(ScalarType::Timestamptz),
                _ => None,
            };
            if let Some(scalar) = temporal {
                let text = match c.arg.as_deref()?.node.as_ref()? {
                    N::AConst(a) => match a.val.as_ref()? {
                        a_const::Val::Sval(s) => s.sval.clone(),
                        _ => return None,
                    },
                    _ => return None,
                };
                return (ty.array_bounds.is_empty() && ty.typmods.is_empty())
                    .then_some(Constant::Typed(scalar, text));
            }
            let same = ["int2", "int4", "int8", "numeric", "text", "varchar", "uuid"];
            // `varchar(5)` truncates: not the same value.
            if !same.contains(&name.sval.as_str())
                || !ty.array_bounds.is_empty()
                || !ty.typmods.is_empty()
            {
                return None;
            }
            // `5.7::int4` is 6: under an integer cast only integers stand for themselves
            // (`'7.6'::numeric::int4` is 8, and so is a numeric parameter of 7.6).
            let inner = constant(c.arg.as_deref()?)?;
            if !name.sval.starts_with("int") {
                return Some(inner);
            }
            return match inner {
                Constant::Int(_) => Some(inner),
                Constant::Text(t) => t.trim().parse::<i64>().ok().map(Constant::Int),
                // Resolved as a sum: only a value that is an integer is read.
                Constant::Param(_) | Constant::Sum(..) => Some(Constant::Sum(Box::new(inner), 0)),
                _ => None,
            };
        }
        Some(N::ParamRef(p)) => return u32::try_from(p.number).ok().map(Constant::Param),
        Some(N::AExpr(e)) if e.kind == AExprKind::AexprOp as i32 => {
            // `x + k`, `k + x`, `x - k` with an integer literal k: BETWEEN $1 AND $1 + 99.
            let (l, r) = (
                constant(e.lexpr.as_deref()?)?,
                constant(e.rexpr.as_deref()?)?,
            );
            return match (operator(&e.name)?, l, r) {
                ("+", x, Constant::Int(k)) | ("+", Constant::Int(k), x) => {
                    Some(Constant::Sum(Box::new(x), k))
                }
                ("-", x, Constant::Int(k)) => Some(Constant::Sum(Box::new(x), k.checked_neg()?)),
                _ => None,
            };
        }
        _ => {}
    }
    let Some(N::AConst(c)) = node.node.as_ref() else {
        return None;
    };
    match c.val.as_ref()? {
        a_const::Val::Ival(i) => Some(Constant::Int(i.ival.into())),
        a_const::Val::Boolval(b) => Some(Constant::Bool(b.boolval)),
        a_const::Val::Sval(s) => Some(Constant::Text(s.sval.clone())),
        // Integers beyond int4 arrive as "float" text, like decimals.
        a_const::Val::Fval(f) => Some(
            f.fval
                .parse::<i64>()
                .map_or_else(|_| Constant::Decimal(f.fval.clone()), Constant::Int),
        ),
        _ => None,
    }
}

/// Whether `<`, `<=`, `>`, `>=` and `BETWEEN` on a column of `scalar` compare as its
/// order-preserving encoding does, under every setting and collation: integers, float8
/// (-0 is 0, and NaN, which has no encoding, is above every number as in Postgres),
/// numeric(p, s) (constants read at the column's scale, its specials placed, see
/// [`numeric_predicate`]), and dates and timestamps once their constants are read (see
/// [`to_prune`]).
pub fn ranged(scalar: ScalarType) -> bool {
    matches!(
        scalar,
        ScalarType::Int2
            | ScalarType::Int4
            | ScalarType::Int8
            | ScalarType::Float8
            | ScalarType::Date
            | ScalarType::Timestamp
            | ScalarType::Timestamptz
            | ScalarType::Numeric(NumericRepr::Decimal { .. })
    )
}

/// Whether `scalar` is a type whose values compare as their bytes when its collation is
/// C: text and varchar (bpchar compares without trailing blanks).
pub fn text_ordered(scalar: ScalarType) -> bool {
    matches!(scalar, ScalarType::Text(TextKind::Text | TextKind::Varchar))
}

/// A float8 constant as Postgres reads it for a float8 comparison: an integer (cast
/// exactly as `int8::float8` rounds), a decimal literal or a string in plain decimal
/// notation (correctly rounded, as `float8in` does), `Infinity`, or a binary parameter.
/// `None` for NaN (outside the encoding), for anything whose reading could differ
/// (hexadecimal, other words), and for values out of float8's range (Postgres raises
/// an error for those, which the statement then does).
fn float8_constant(value: &Constant) -> Option<f64> {
    let decimal = |text: &str| -> Option<f64> {
        let t = text.trim_matches(|c: char| c.is_ascii_whitespace());
        let lower = t.to_ascii_lowercase();
        match lower.trim_start_matches(['+', '-']) {
            "infinity" | "inf" => {
                return Some(if lower.starts_with('-') {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                })
            }
            _ => {}
        }
        let plain = t
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'+' | b'-' | b'.' | b'e' | b'E'));
        let v: f64 = t.parse().ok().filter(|_| plain && !t.is_empty())?;
        // Overflow to infinity or underflow to zero: Postgres refuses the literal.
        let digits_nonzero = t
            .split(['e', 'E'])
            .next()
            .is_some_and(|m| m.bytes().any(|b| (b'1'..=b'9').contains(&b)));
        (v.is_finite() && (v != 0.0 || !digits_nonzero)).then_some(v)
    };
    match value {
        Constant::Int(v) => Some(*v as f64),
        Constant::Decimal(t) | Constant::Text(t) => decimal(t),
        Constant::Float(bits) => Some(f64::from_bits(*bits)).filter(|v| !v.is_nan()),
        _ => None,
    }
}

/// The predicates the cold planner can use, for a table with `columns`, with the
/// statement's parameters standing for `params`.
pub fn to_prune(
    predicates: &[ColumnPredicate],
    columns: &[SegmentColumn],
    params: &BoundParams<'_>,
) -> Vec<Predicate> {
    predicates
        .iter()
        .filter_map(|p| prune_one(p, columns, params))
        .collect()
}

/// [`to_prune`] of one predicate; a disjunction only when every part of it converts.
fn prune_one(
    p: &ColumnPredicate,
    columns: &[SegmentColumn],
    params: &BoundParams<'_>,
) -> Option<Predicate> {
    if let Comparison::Any(any) = &p.comparison {
        let any = any
            .iter()
            .map(|all| {
                all.iter()
                    .map(|p| prune_one(p, columns, params))
                    .collect::<Option<Vec<_>>>()
            })
            .collect::<Option<Vec<_>>>()?;
        return Some(Predicate::Any(any));
    }
    let column = columns.iter().find(|c| c.name == p.column)?;
    let ColdType::Scalar(scalar) = column.ty else {
        return None;
    };
    // Under a nondeterministic collation equal values may differ in their bytes.
    if column.nondeterministic {
        return None;
    }
    let attnum = column.attnum;
    if let ScalarType::Numeric(NumericRepr::Decimal { scale, .. }) = scalar {
        let read = |v: &Constant| numeric_constant(&resolve(v, scalar, params)?, scale);
        return numeric_predicate(attnum, &p.comparison, read);
    }
    let encode = |v: &Constant| encode(scalar, &resolve(v, scalar, params)?, params.settings.utc);
    // Text is compared in order only where Postgres orders it as bytes (C collation).
    let ranged = ranged(scalar) || (column.byte_ordered && text_ordered(scalar));
    match &p.comparison {
        Comparison::IsNull => Some(Predicate::IsNull(attnum)),
        Comparison::IsNotNull => Some(Predicate::IsNotNull(attnum)),
        Comparison::Eq(v) => encode(v).map(|v| Predicate::Eq(attnum, v)),
        // Inequality is equality's negation, whatever the order: below or above in the
        // encoding's (NULL is neither, as `<>` does not hold for it).
        Comparison::NotEq(v) => encode(v).map(|v| {
            Predicate::Any(vec![
                vec![Predicate::Below(attnum, v.clone(), false)],
                vec![Predicate::Above(attnum, v, false)],
            ])
        }),
        Comparison::In(vs) => vs
            .iter()
            .map(encode)
            .collect::<Option<Vec<_>>>()
            .map(|vs| Predicate::In(attnum, vs)),
        Comparison::Below(v, inclusive) if ranged => {
            encode(v).map(|v| Predicate::Below(attnum, v, *inclusive))
        }
        Comparison::Above(v, inclusive) if ranged => {
            encode(v).map(|v| Predicate::Above(attnum, v, *inclusive))
        }
        _ => None,
    }
}

/// A constant compared with a numeric(p, s) column, read at the column's `scale`: an
/// integer, a numeric literal, or a string or parameter in numeric's text form (a float8
/// value makes the comparison a float8 one, not read here).
fn numeric_constant(value: &Constant, scale: i8) -> Option<Scaled> {
    match value {
        Constant::Int(v) => numeric::scaled(&v.to_string(), scale),
        Constant::Decimal(t) | Constant::Text(t) => numeric::scaled(t, scale),
        _ => None,
    }
}

/// The predicate of a comparison with a numeric(p, s) column whose constants `read`
/// gives at the column's scale. Column values are exact at that scale, so a constant
/// between two of them compares as the nearer one on the comparison's side: `x < 1.005`
/// at scale 2 is `x <= 1.00`, `x = 1.005` holds for no value (an empty IN list), `x <> 1.005`
/// for every one that is not NULL. Specials compare as numeric orders them.
fn numeric_predicate(
    attnum: i16,
    comparison: &Comparison,
    read: impl Fn(&Constant) -> Option<Scaled>,
) -> Option<Predicate> {
    let at = |v: i128| ordered::decimal(v).to_vec();
    // The encoding of a constant equal to a value the column can hold, `None` for one between.
    let exact = |s: Scaled| match s {
        Scaled::Special(s) => Some(ordered::numeric_special(s).to_vec()),
        Scaled::Finite { floor, exact } => exact.then(|| at(floor)),
    };
    Some(match comparison {
        Comparison::IsNull => Predicate::IsNull(attnum),
        Comparison::IsNotNull => Predicate::IsNotNull(attnum),
        Comparison::Eq(v) => match exact(read(v)?) {
            Some(v) => Predicate::Eq(attnum, v),
            None => Predicate::In(attnum, Vec::new()),
        },
        Comparison::NotEq(v) => match exact(read(v)?) {
            Some(v) => Predicate::Any(vec![
                vec![Predicate::Below(attnum, v.clone(), false)],
                vec![Predicate::Above(attnum, v, false)],
            ]),
            None => Predicate::IsNotNull(attnum),
        },
        Comparison::In(vs) => {
            let read: Vec<Scaled> = vs.iter().map(&read).collect::<Option<_>>()?;
            Predicate::In(attnum, read.into_iter().filter_map(exact).collect())
        }
        Comparison::Below(v, inclusive) => match read(v)? {
            Scaled::Finite {
                floor,
                exact: false,
            } => Predicate::Below(attnum, at(floor), true),
            s => Predicate::Below(attnum, exact(s)?, *inclusive),
        },
        Comparison::Above(v, inclusive) => match read(v)? {
            Scaled::Finite {
                floor,
                exact: false,
            } => Predicate::Above(attnum, at(floor + 1), true),
            s => Predicate::Above(attnum, exact(s)?, *inclusive),
        },
        Comparison::Any(_) => return None,
    })
}

/// The keys a conjunction pins every key column of to values (`Eq` or `IN`), with the
/// client's parameters resolved, as jsonb objects (`{"id": 5}`): the cross product for a
/// composite key. `None` when a key column is not pinned, a value is not one coldwire can
/// compare in segments, or there are more than `limit` keys.
pub fn pinned_keys(
    predicates: &[ColumnPredicate],
    pk: &[String],
    columns: &[SegmentColumn],
    params: &BoundParams<'_>,
    limit: usize,
) -> Option<Vec<serde_json::Map<String, serde_json::Value>>> {
    let mut keys = vec![serde_json::Map::new()];
    for key in pk {
        let column = columns.iter().find(|c| &c.name == key)?;
        let ColdType::Scalar(scalar) = column.ty else {
            return None;
        };
        let values: Vec<serde_json::Value> = predicates
            .iter()
            .filter(|p| &p.column == key)
            .find_map(|p| match &p.comparison {
                Comparison::Eq(v) => Some(vec![v.clone()]),
                Comparison::In(vs) => Some(vs.clone()),
                _ => None,
            })?
            .iter()
            .map(|v| {
                let v = resolve(v, scalar, params)?;
                encode(scalar, &v, params.settings.utc)?;
                Some(match (scalar, v) {
                    (_, Constant::Int(i)) => serde_json::Value::from(i),
                    (ScalarType::Int2 | ScalarType::Int4 | ScalarType::Int8, Constant::Text(t)) => {
                        serde_json::Value::from(t.trim().parse::<i64>().ok()?)
                    }
                    (_, Constant::Text(t)) => serde_json::Value::from(t),
                    _ => return None,
                })
            })
            .collect::<Option<_>>()?;
        keys = extend_keys(&keys, &values, limit, |k, v| {
            k.insert(key.clone(), v.clone());
        })?;
    }
    Some(keys)
}

/// A scan over the keys `candidates` names (jsonb objects by key column): an IN list per
/// key column of the values coldwire can compare in segments (a superset; a column
/// without one is not restricted).
pub fn candidate_scan(candidates: &[serde_json::Value], pk: &[String]) -> Vec<ColumnPredicate> {
    pk.iter()
        .filter_map(|key| {
            let values: Option<Vec<Constant>> = candidates
                .iter()
                .map(|c| match c.get(key)? {
                    serde_json::Value::Number(n) => n.as_i64().map(Constant::Int),
                    serde_json::Value::String(s) => Some(Constant::Text(s.clone())),
                    _ => None,
                })
                .collect();
            values.map(|values| ColumnPredicate {
                column: key.clone(),
                comparison: Comparison::In(values),
            })
        })
        .collect()
}

/// `value` with parameters replaced by their Bind values and sums computed (integers
/// only, overflow giving nothing).
fn resolve(value: &Constant, scalar: ScalarType, params: &BoundParams<'_>) -> Option<Constant> {
    match value {
        Constant::Param(n) => params.constant(*n, scalar),
        Constant::Sum(x, k) => {
            let x = match resolve(x, scalar, params)? {
                Constant::Int(v) => v,
                Constant::Text(t) => t.trim().parse::<i64>().ok()?,
                _ => return None,
            };
            x.checked_add(*k).map(Constant::Int)
        }
        other => Some(other.clone()),
    }
}

fn encode(scalar: ScalarType, value: &Constant, utc: bool) -> Option<Vec<u8>> {
    let int = |v: i64| Some(ordered::int(v).to_vec());
    let temporal = match scalar {
        ScalarType::Date => Some(TemporalKind::Date),
        ScalarType::Timestamp => Some(TemporalKind::Timestamp),
        ScalarType::Timestamptz => Some(TemporalKind::Timestamptz { utc }),
        _ => None,
    };
    if let Some(kind) = temporal {
        // Dates and timestamps: strict ISO literals (their meaning does not depend on
        // DateStyle; a timestamptz's on TimeZone only without an offset), or a Bind
        // value of the column's own type already in Arrow's units.
        return match value {
            Constant::Text(s) => temporal_literal(s, kind).and_then(int),
            Constant::Typed(ty, s) if *ty == scalar => temporal_literal(s, kind).and_then(int),
            Constant::Int(v) => int(*v),
            _ => None,
        };
    }
    match (scalar, value) {
        (ScalarType::Float8, v) => float8_constant(v)
            .and_then(ordered::float)
            .map(|b| b.to_vec()),
        (ScalarType::Int2 | ScalarType::Int4 | ScalarType::Int8, Constant::Int(v)) => int(*v),
        (ScalarType::Int2 | ScalarType::Int4 | ScalarType::Int8, Constant::Text(s)) => {
            s.trim().parse::<i64>().ok().and_then(int)
        }
        (ScalarType::Text(TextKind::Text | TextKind::Varchar), Constant::Text(s)) => {
            Some(s.as_bytes().to_vec())
        }
        (ScalarType::Bool, Constant::Bool(b)) => Some(ordered::boolean(*b).to_vec()),
        (ScalarType::Bool, Constant::Text(s)) => {
            bool_literal(s).map(|b| ordered::boolean(b).to_vec())
        }
        (ScalarType::Uuid, Constant::Text(s)) => {
            uuid::Uuid::parse_str(s).ok().map(|u| u.as_bytes().to_vec())
        }
        _ => None,
    }
}

/// A boolean literal as `boolin` reads it, for the spellings it takes whole (`t`, `true`,
/// `yes`, `on`, `1`, … in any case, blanks around); `None` for the prefixes it also takes
/// and anything else (no predicate then).
fn bool_literal(text: &str) -> Option<bool> {
    match text
        .trim_matches(|c: char| c.is_ascii_whitespace())
        .to_ascii_lowercase()
        .as_str()
    {
        "t" | "true" | "y" | "yes" | "on" | "1" => Some(true),
        "f" | "false" | "n" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
#[path = "predicates_tests.rs"]
mod tests;
