//! Cold pruning (DESIGN §6.3), sans-IO: which segments and row groups may hold rows that
//! satisfy a conjunction of simple predicates, judged by the stats the flush recorded
//! (`coldwire.segment_stats`, in the order-preserving encoding of [`crate::values::ordered`]).
//!
//! Pruning only ever over-selects (invariant 7): a predicate coldwire cannot judge keeps
//! everything, and Postgres re-applies the whole query to the rows that come back. The
//! caller builds predicates only where the byte order is the comparison's order (text only
//! under the C collation, no TimeZone- or DateStyle-dependent constants).

use std::cmp::Ordering;

/// A comparison of one column with constants, all values in the order-preserving encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Predicate {
    /// `col = v`
    Eq(i16, Vec<u8>),
    /// `col < v`, `col <= v` (inclusive when true)
    Below(i16, Vec<u8>, bool),
    /// `col > v`, `col >= v` (inclusive when true)
    Above(i16, Vec<u8>, bool),
    /// `col IN (v, …)` / `col = ANY(…)`
    In(i16, Vec<Vec<u8>>),
    /// `col IS NULL`
    IsNull(i16),
    /// `col IS NOT NULL`
    IsNotNull(i16),
    /// A disjunction of conjunctions of the others, on any columns: `a = 1 OR (b > 2
    /// AND c IS NULL)`, `a <> 5` (`a < 5 OR a > 5`).
    Any(Vec<Vec<Predicate>>),
}

/// `keys` (partial keys) each extended by every one of `values` with `add`: the keys over
/// one more key column. `None` when there would be more than `limit`.
pub fn extend_keys<K: Clone, V>(
    keys: &[K],
    values: &[V],
    limit: usize,
    add: impl Fn(&mut K, &V),
) -> Option<Vec<K>> {
    if keys.len().checked_mul(values.len())? > limit {
        return None;
    }
    Some(
        keys.iter()
            .flat_map(|k| {
                values.iter().map(|v| {
                    let mut k = k.clone();
                    add(&mut k, v);
                    k
                })
            })
            .collect(),
    )
}

/// At most how many values of integer column `attnum` satisfy every one of
/// `predicates` (`u128::MAX`: unbounded), from their `=`, `IN` and range conjuncts.
pub fn integer_values(predicates: &[Predicate], attnum: i16) -> u128 {
    let (mut lo, mut hi) = (i128::from(i64::MIN), i128::from(i64::MAX));
    let mut listed: Option<u128> = None;
    let int = |v: &[u8]| crate::values::ordered::int_from(v).map(i128::from);
    for p in predicates.iter().filter(|p| p.attnum() == Some(attnum)) {
        match p {
            Predicate::Eq(_, v) => {
                if let Some(x) = int(v) {
                    lo = lo.max(x);
                    hi = hi.min(x);
                }
            }
            Predicate::Above(_, v, inclusive) => {
                if let Some(x) = int(v) {
                    lo = lo.max(if *inclusive { x } else { x + 1 });
                }
            }
            Predicate::Below(_, v, inclusive) => {
                if let Some(x) = int(v) {
                    hi = hi.min(if *inclusive { x } else { x - 1 });
                }
            }
            Predicate::In(_, vs) => {
                let n = vs.len() as u128;
                listed = Some(listed.map_or(n, |l| l.min(n)));
            }
            Predicate::IsNull(_) | Predicate::IsNotNull(_) | Predicate::Any(_) => {}
        }
    }
    let range = u128::try_from((hi - lo + 1).max(0)).unwrap_or(0);
    listed.map_or(range, |l| l.min(range))
}

impl Predicate {
    /// The column (attnum) the predicate constrains; `None` for a disjunction.
    pub fn attnum(&self) -> Option<i16> {
        match self {
            Predicate::Eq(a, _)
            | Predicate::Below(a, ..)
            | Predicate::Above(a, ..)
            | Predicate::In(a, _)
            | Predicate::IsNull(a)
            | Predicate::IsNotNull(a) => Some(*a),
            Predicate::Any(_) => None,
        }
    }

    /// Every column (attnum) the predicate reads.
    pub fn attnums(&self) -> Vec<i16> {
        match self {
            Predicate::Any(any) => any.iter().flatten().flat_map(Predicate::attnums).collect(),
            other => other.attnum().into_iter().collect(),
        }
    }

    /// Whether rows whose columns' stats `stats_of` gives (by attnum; `None`: unknown)
    /// may satisfy the predicate.
    pub fn may_match_in<'a>(&self, stats_of: &impl Fn(i16) -> Option<RangeStats<'a>>) -> bool {
        match self {
            Predicate::Any(any) => any
                .iter()
                .any(|all| all.iter().all(|p| p.may_match_in(stats_of))),
            leaf => leaf
                .attnum()
                .and_then(stats_of)
                .is_none_or(|stats| leaf.may_match(&stats)),
        }
    }

    /// Whether the row whose cells `cell_of` judges (by attnum: whether the cell
    /// satisfies a one-column predicate; `None` when it cannot tell) satisfies the
    /// predicate; `unknown` stands for what cannot be told.
    pub fn holds(&self, cell_of: &impl Fn(&Predicate) -> Option<bool>, unknown: bool) -> bool {
        match self {
            Predicate::Any(any) => any
                .iter()
                .any(|all| all.iter().all(|p| p.holds(cell_of, unknown))),
            leaf => cell_of(leaf).unwrap_or(unknown),
        }
    }

    /// Whether a column whose values in some range of rows are described by `stats` may
    /// satisfy the predicate there.
    pub fn may_match(&self, stats: &RangeStats<'_>) -> bool {
        let ordered = stats.rows - stats.nulls - stats.unordered;
        let within = |v: &[u8]| match (stats.min, stats.max) {
            (Some(min), Some(max)) => min <= v && v <= max,
            _ => ordered > 0,
        };
        match self {
            Predicate::Any(_) => true,
            Predicate::IsNull(_) => stats.nulls > 0,
            Predicate::IsNotNull(_) => stats.rows > stats.nulls,
            // NaN-like values equal no constant with an encoding.
            Predicate::Eq(_, v) => ordered > 0 && within(v),
            Predicate::In(_, vs) => ordered > 0 && vs.iter().any(|v| within(v)),
            // NaN sorts above every number: `x > c` holds for it, `x < c` never.
            Predicate::Below(_, v, inclusive) => {
                ordered > 0
                    && stats.min.is_none_or(|min| match min.cmp(v.as_slice()) {
                        Ordering::Less => true,
                        Ordering::Equal => *inclusive,
                        Ordering::Greater => false,
                    })
            }
            Predicate::Above(_, v, inclusive) => {
                stats.unordered > 0
                    || (ordered > 0
                        && stats.max.is_none_or(|max| match max.cmp(v.as_slice()) {
                            Ordering::Greater => true,
                            Ordering::Equal => *inclusive,
                            Ordering::Less => false,
                        }))
            }
        }
    }

    /// Whether a single value (`None`: NULL; `Some(None)`: a value without an encoding,
    /// such as NaN; `Some(Some(bytes))`: an encoded value) satisfies the predicate.
    pub fn matches(&self, value: Option<Option<&[u8]>>) -> bool {
        match (self, value) {
            // Judged column by column ([`Predicate::holds`]).
            (Predicate::Any(_), _) => true,
            (Predicate::IsNull(_), v) => v.is_none(),
            (Predicate::IsNotNull(_), v) => v.is_some(),
            (_, None) => false,
            (Predicate::Above(..), Some(None)) => true,
            (_, Some(None)) => false,
            (Predicate::Eq(_, c), Some(Some(v))) => v == c.as_slice(),
            (Predicate::In(_, cs), Some(Some(v))) => cs.iter().any(|c| v == c.as_slice()),
            (Predicate::Below(_, c, inclusive), Some(Some(v))) => {
                v < c.as_slice() || (*inclusive && v == c.as_slice())
            }
            (Predicate::Above(_, c, inclusive), Some(Some(v))) => {
                v > c.as_slice() || (*inclusive && v == c.as_slice())
            }
        }
    }
}

/// What the stats say about one column over some rows (a row group or a segment).
#[derive(Debug, Clone, Copy)]
pub struct RangeStats<'a> {
    pub rows: i64,
    pub nulls: i64,
    /// Non-NULL values without an encoding (NaN).
    pub unordered: i64,
    /// Bounds of the encoded values; `None` when unknown.
    pub min: Option<&'a [u8]>,
    pub max: Option<&'a [u8]>,
}

/// Stats of one column of one segment (`coldwire.segment_stats`): for the whole segment
/// and per row group. `None` bounds mean "no bound known": the column is all NULL/NaN
/// there (see the counts) or its type has no byte order. `nan_count` counts values outside
/// the min/max order: float NaN; numeric NaN and ±Infinity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColumnStats {
    pub attnum: i16,
    pub min: Option<Vec<u8>>,
    pub max: Option<Vec<u8>>,
    pub null_count: i64,
    pub nan_count: i64,
    pub rg_min: Vec<Option<Vec<u8>>>,
    pub rg_max: Vec<Option<Vec<u8>>>,
    pub rg_null_count: Vec<i64>,
    pub rg_nan_count: Vec<i64>,
}

impl ColumnStats {
    /// For a numeric(p, s) column, whose NaN and ±Infinity the flush counts in
    /// `nan_count`: places them as predicates do ([`crate::values::ordered::numeric_special`],
    /// -Infinity lowest and NaN highest), so a range that counts any has bounds from
    /// -Infinity to NaN and counts them as ordered values.
    pub fn place_specials(&mut self) {
        use crate::values::numeric::Special;
        use crate::values::ordered::numeric_special;
        let low = numeric_special(Special::NegInf).to_vec();
        let high = numeric_special(Special::NaN).to_vec();
        if self.nan_count > 0 {
            self.min = Some(low.clone());
            self.max = Some(high.clone());
            self.nan_count = 0;
        }
        for g in 0..self.rg_nan_count.len() {
            if self.rg_nan_count[g] > 0 {
                if let Some(min) = self.rg_min.get_mut(g) {
                    *min = Some(low.clone());
                }
                if let Some(max) = self.rg_max.get_mut(g) {
                    *max = Some(high.clone());
                }
                self.rg_nan_count[g] = 0;
            }
        }
    }
}

/// A segment as the planner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentMeta {
    pub segment_id: uuid::Uuid,
    pub path: String,
    pub rows: i64,
    pub columns: Vec<ColumnStats>,
}

impl SegmentMeta {
    /// Whether the segment may hold rows satisfying every predicate.
    pub fn may_match(&self, predicates: &[Predicate]) -> bool {
        let stats_of = |attnum: i16| {
            let c = self.columns.iter().find(|c| c.attnum == attnum)?;
            Some(RangeStats {
                rows: self.rows,
                nulls: c.null_count,
                unordered: c.nan_count,
                min: c.min.as_deref(),
                max: c.max.as_deref(),
            })
        };
        predicates.iter().all(|p| p.may_match_in(&stats_of))
    }

    /// Row groups (whose row counts the footer gives) that may hold rows satisfying every
    /// predicate. Stats that do not line up with the footer keep every row group.
    pub fn row_groups_to_read(
        &self,
        predicates: &[Predicate],
        row_group_rows: &[i64],
    ) -> Vec<usize> {
        (0..row_group_rows.len())
            .filter(|&g| {
                let stats_of = |attnum: i16| {
                    let c = self.columns.iter().find(|c| c.attnum == attnum)?;
                    (c.rg_null_count.len() == row_group_rows.len()).then(|| RangeStats {
                        rows: row_group_rows[g],
                        nulls: c.rg_null_count[g],
                        unordered: c.rg_nan_count.get(g).copied().unwrap_or(0),
                        min: c.rg_min.get(g).and_then(|v| v.as_deref()),
                        max: c.rg_max.get(g).and_then(|v| v.as_deref()),
                    })
                };
                predicates.iter().all(|p| p.may_match_in(&stats_of))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::ordered::int;

    fn stats<'a>(min: &'a [u8], max: &'a [u8]) -> RangeStats<'a> {
        RangeStats {
            rows: 10,
            nulls: 0,
            unordered: 0,
            min: Some(min),
            max: Some(max),
        }
    }

    #[test]
    fn integer_values_counts_what_key_conditions_leave() {
        let between = [
            Predicate::Above(1, int(100).to_vec(), true),
            Predicate::Below(1, int(199).to_vec(), true),
        ];
        assert_eq!(integer_values(&between, 1), 100);
        assert_eq!(integer_values(&between, 2), u128::from(u64::MAX) + 1);
        let open = [
            Predicate::Above(1, int(-5).to_vec(), false),
            Predicate::Below(1, int(-5).to_vec(), false),
        ];
        assert_eq!(integer_values(&open, 1), 0);
        let listed = [Predicate::In(1, vec![int(1).to_vec(), int(9).to_vec()])];
        assert_eq!(integer_values(&listed, 1), 2);
        assert_eq!(integer_values(&[Predicate::Eq(1, int(7).to_vec())], 1), 1);
    }

    #[test]
    fn ranges_prune_what_cannot_match_and_nothing_else() {
        let (lo, hi) = (int(10), int(20));
        let s = stats(&lo, &hi);
        assert!(Predicate::Eq(1, int(10).to_vec()).may_match(&s));
        assert!(Predicate::Eq(1, int(20).to_vec()).may_match(&s));
        assert!(!Predicate::Eq(1, int(21).to_vec()).may_match(&s));
        assert!(!Predicate::Eq(1, int(-5).to_vec()).may_match(&s));
        assert!(Predicate::In(1, vec![int(1).to_vec(), int(15).to_vec()]).may_match(&s));
        assert!(!Predicate::In(1, vec![int(1).to_vec(), int(25).to_vec()]).may_match(&s));
        assert!(!Predicate::Below(1, int(10).to_vec(), false).may_match(&s));
        assert!(Predicate::Below(1, int(10).to_vec(), true).may_match(&s));
        assert!(!Predicate::Above(1, int(20).to_vec(), false).may_match(&s));
        assert!(Predicate::Above(1, int(20).to_vec(), true).may_match(&s));
        assert!(!Predicate::IsNull(1).may_match(&s));
        assert!(Predicate::IsNotNull(1).may_match(&s));
    }

    #[test]
    fn nan_keeps_greater_than_and_nulls_keep_is_null() {
        let (lo, hi) = (int(10), int(20));
        let s = RangeStats {
            unordered: 1,
            nulls: 2,
            ..stats(&lo, &hi)
        };
        assert!(
            Predicate::Above(1, int(100).to_vec(), false).may_match(&s),
            "NaN > 100"
        );
        assert!(!Predicate::Below(1, int(5).to_vec(), false).may_match(&s));
        assert!(Predicate::IsNull(1).may_match(&s));
        let all_null = RangeStats {
            rows: 3,
            nulls: 3,
            unordered: 0,
            min: None,
            max: None,
        };
        assert!(!Predicate::Eq(1, int(1).to_vec()).may_match(&all_null));
        assert!(!Predicate::IsNotNull(1).may_match(&all_null));
    }

    #[test]
    fn unknown_bounds_keep_everything_with_values() {
        let s = RangeStats {
            rows: 3,
            nulls: 0,
            unordered: 0,
            min: None,
            max: None,
        };
        for p in [
            Predicate::Eq(1, vec![1]),
            Predicate::Below(1, vec![0], false),
            Predicate::Above(1, vec![255], false),
        ] {
            assert!(p.may_match(&s), "{p:?}");
        }
    }

    #[test]
    fn single_values_follow_sql_three_valued_logic() {
        let ten = int(10);
        let p = Predicate::Below(1, int(20).to_vec(), false);
        assert!(p.matches(Some(Some(&ten))));
        assert!(!p.matches(None), "NULL < 20 is not true");
        assert!(!p.matches(Some(None)), "NaN < 20 is false");
        assert!(
            Predicate::Above(1, int(20).to_vec(), false).matches(Some(None)),
            "NaN > 20"
        );
        assert!(Predicate::IsNull(1).matches(None));
    }

    #[test]
    fn row_groups_are_chosen_per_predicate_column() {
        let seg = SegmentMeta {
            segment_id: uuid::Uuid::nil(),
            path: "p".into(),
            rows: 20,
            columns: vec![ColumnStats {
                attnum: 1,
                min: Some(int(1).to_vec()),
                max: Some(int(20).to_vec()),
                null_count: 0,
                nan_count: 0,
                rg_min: vec![Some(int(1).to_vec()), Some(int(11).to_vec())],
                rg_max: vec![Some(int(10).to_vec()), Some(int(20).to_vec())],
                rg_null_count: vec![0, 0],
                rg_nan_count: vec![0, 0],
            }],
        };
        let groups = [10, 10];
        assert_eq!(
            seg.row_groups_to_read(&[Predicate::Eq(1, int(12).to_vec())], &groups),
            vec![1]
        );
        assert_eq!(
            seg.row_groups_to_read(&[Predicate::Eq(2, int(12).to_vec())], &groups),
            vec![0, 1],
            "no stats: keep"
        );
        assert!(seg
            .row_groups_to_read(&[Predicate::Eq(1, int(99).to_vec())], &groups)
            .is_empty());
        assert!(seg.may_match(&[Predicate::Eq(1, int(12).to_vec())]));
        assert!(!seg.may_match(&[Predicate::Eq(1, int(99).to_vec())]));
        assert_eq!(
            seg.row_groups_to_read(&[Predicate::Eq(1, int(12).to_vec())], &[20]),
            vec![0],
            "misaligned stats keep all"
        );
    }
}
