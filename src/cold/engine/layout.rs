//! What the engine's stream carries: the columns read from segments (only those a
//! group, partial or condition needs, with the key), then the columns computed from
//! them: truncated group columns (`_cw_g<i>`) and the arguments of partials under a
//! FILTER (`_cw_a<i>`).

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use super::Aggregation;
use crate::cold::scan::ColdTable;
use crate::segment::prune::Predicate;
use crate::values::trunc::TruncUnit;

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
                .collect::<Vec<Field>>(),
        ));
        Layout {
            attnums: needed.iter().map(|&c| table.columns[c].attnum).collect(),
            needed,
            truncs,
            masked,
            schema,
        }
    }
}
