//! What the engine's stream carries: the columns read from segments (only those a
//! group, partial or condition needs, with the key), then the columns computed from
//! them: truncated group columns (`_cw_g<i>`), the arguments of partials under a
//! FILTER (`_cw_a<i>`), and numeric(p, s) arguments split in value and special
//! (`_cw_v<i>`, `_cw_s<i>`).

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use super::Aggregation;
use crate::cold::scan::ColdTable;
use crate::segment::prune::Predicate;
use crate::sql::aggregate::PartialKind;
use crate::values::trunc::TruncUnit;
use crate::values::{ColdType, NumericRepr, ScalarType};

/// A group column computed from a read one: `date_trunc(unit, needed[from])`, the
/// engine's column `_cw_g<group>`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Trunc {
    pub(super) group: usize,
    pub(super) from: usize,
    pub(super) unit: TruncUnit,
}

/// The argument of a partial under a FILTER, computed from the read columns: column
/// `needed[from]` (or 1, for `count(*)`) where every check holds, else NULL.
#[derive(Debug, Clone)]
pub(super) struct Masked {
    pub(super) partial: usize,
    pub(super) from: Option<usize>,
    /// The FILTER's predicates.
    pub(super) checks: Vec<Predicate>,
}

/// A numeric(p, s) argument of a sum, min or max, split in two computed columns:
/// `_cw_v<partial>`, its finite value (a Decimal128, NULL for NULLs and specials), and
/// `_cw_s<partial>`, its special's [`special_code`] (NULL otherwise). The partial is then
/// composed from the aggregate of the values and the least and greatest code
/// ([`super::compose_numeric`]), as Postgres's numeric aggregates treat specials.
#[derive(Debug, Clone, Copy)]
pub(super) struct NumericSplit {
    pub(super) partial: usize,
    /// The stream column holding the argument (read, or masked by a FILTER).
    pub(super) from: usize,
    pub(super) precision: u8,
    pub(super) scale: i8,
}

/// The codes of numeric's specials, in numeric's order: -Infinity 1, Infinity 2, NaN 3.
pub(super) fn special_code(s: crate::values::numeric::Special) -> i8 {
    use crate::values::numeric::Special;
    match s {
        Special::NegInf => 1,
        Special::PosInf => 2,
        Special::NaN => 3,
    }
}

/// The stream's columns.
#[derive(Debug)]
pub(super) struct Layout {
    /// Positions in the table's columns of the columns read, ascending.
    pub(super) needed: Vec<usize>,
    /// The attnums of `needed`, in its order (conditions find their columns by attnum,
    /// once per row).
    attnums: Vec<i16>,
    pub(super) truncs: Vec<Trunc>,
    pub(super) masked: Vec<Masked>,
    pub(super) numerics: Vec<NumericSplit>,
    pub(super) schema: SchemaRef,
}

impl Layout {
    /// Where column `attnum` is among the columns read.
    pub(super) fn column_at(&self, attnum: i16) -> Option<usize> {
        self.attnums.iter().position(|&a| a == attnum)
    }

    /// The columns the partials of `aggregation` need over rows that satisfy
    /// `predicates`.
    pub(super) fn new(
        table: &ColdTable,
        predicates: &[Predicate],
        aggregation: Aggregation<'_>,
    ) -> Self {
        let Aggregation {
            group,
            partials,
            filters,
        } = aggregation;
        let positions = |p: &Predicate| {
            p.attnums()
                .into_iter()
                .filter_map(|a| table.position(a))
                .collect::<Vec<_>>()
        };
        let mut needed: Vec<usize> = group
            .iter()
            .map(|g| g.column)
            .chain(partials.iter().filter_map(|p| p.column))
            .chain(table.pk_positions.iter().copied())
            .chain(
                predicates
                    .iter()
                    .chain(filters.iter().flatten())
                    .flat_map(positions),
            )
            .collect();
        needed.sort_unstable();
        needed.dedup();
        let read = |column: usize| needed.iter().position(|&c| c == column);
        let truncs: Vec<Trunc> = group
            .iter()
            .enumerate()
            .filter_map(|(i, g)| {
                Some(Trunc {
                    group: i,
                    from: read(g.column)?,
                    unit: g.trunc?,
                })
            })
            .collect();
        // Every aggregate split into partials ignores NULLs: a FILTER nulls the argument
        // where its condition does not hold.
        let masked: Vec<Masked> = partials
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let checks = filters.get(p.filter?)?;
                Some(Masked {
                    partial: i,
                    from: p.column.and_then(read),
                    checks: checks.clone(),
                })
            })
            .collect();
        let numerics: Vec<NumericSplit> = partials
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let column = p.column?;
                let ColdType::Scalar(ScalarType::Numeric(NumericRepr::Decimal {
                    precision,
                    scale,
                })) = table.columns[column].ty
                else {
                    return None;
                };
                if !matches!(
                    p.kind,
                    PartialKind::SumNumeric | PartialKind::Min | PartialKind::Max
                ) {
                    return None;
                }
                let from = match masked.iter().position(|m| m.partial == i) {
                    Some(m) => needed.len() + truncs.len() + m,
                    None => read(column)?,
                };
                Some(NumericSplit {
                    partial: i,
                    from,
                    precision,
                    scale,
                })
            })
            .collect();
        let full = table.file_schema(table.columns.len());
        let type_of = |from: usize| full.field(needed[from]).data_type().clone();
        let schema = Arc::new(Schema::new(
            needed
                .iter()
                .map(|&c| full.field(c).as_ref().clone())
                .chain(
                    truncs
                        .iter()
                        .map(|t| Field::new(format!("_cw_g{}", t.group), type_of(t.from), true)),
                )
                .chain(masked.iter().map(|m| {
                    let data_type = m.from.map_or(DataType::Int64, type_of);
                    Field::new(format!("_cw_a{}", m.partial), data_type, true)
                }))
                .chain(numerics.iter().flat_map(|n| {
                    [
                        Field::new(
                            format!("_cw_v{}", n.partial),
                            DataType::Decimal128(n.precision, n.scale),
                            true,
                        ),
                        Field::new(format!("_cw_s{}", n.partial), DataType::Int8, true),
                    ]
                }))
                .collect::<Vec<Field>>(),
        ));
        Layout {
            attnums: needed.iter().map(|&c| table.columns[c].attnum).collect(),
            needed,
            truncs,
            masked,
            numerics,
            schema,
        }
    }
}
