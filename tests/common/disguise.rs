//! Statements as applications, ORMs and tracing tools send them: a comment before
//! (Hibernate's `use_sql_comments`, query tags of APM agents), inside or after, keywords in
//! any case, odd whitespace and line breaks. The same disguise is applied to both sides of
//! a differential test; it changes no literal and no identifier, only what Postgres's
//! scanner skips or folds (it works on the scanner's tokens).

use rand::rngs::StdRng;
use rand::Rng;

/// One way of dressing a statement, drawn once and applied to both sides.
#[derive(Debug, Clone)]
pub struct Disguise {
    leading: Option<&'static str>,
    trailing: Option<&'static str>,
    /// A block comment after this token (0: none).
    middle_after: usize,
    /// Per keyword, from this seed: upper, lower or mixed case.
    case_seed: u64,
    /// Gaps between tokens become runs of spaces, tabs and newlines.
    odd_spacing: bool,
}

const LEADING: [&str; 5] = [
    "/* app:checkout,controller:orders */ ",
    "-- traceparent='00-4bf92f3577b34da6-00f067aa0ba902b7-01'\n",
    "/*+ hint */\n\t",
    "  /* a */ /* b */ -- c\n",
    "\n\n",
];
const TRAILING: [&str; 3] = [" -- trailing", " /* after */", "\n"];

impl Disguise {
    /// A disguise for one statement: about one in four statements is left as written.
    pub fn draw(rng: &mut StdRng) -> Disguise {
        if rng.random_range(0..4) == 0 {
            return Disguise::none();
        }
        Disguise {
            leading: rng
                .random_bool(0.7)
                .then(|| LEADING[rng.random_range(0..LEADING.len())]),
            trailing: rng
                .random_bool(0.3)
                .then(|| TRAILING[rng.random_range(0..TRAILING.len())]),
            middle_after: if rng.random_bool(0.3) {
                rng.random_range(1..6)
            } else {
                0
            },
            case_seed: rng.random(),
            odd_spacing: rng.random_bool(0.4),
        }
    }

    /// The statement as written.
    pub fn none() -> Disguise {
        Disguise {
            leading: None,
            trailing: None,
            middle_after: 0,
            case_seed: 0,
            odd_spacing: false,
        }
    }

    /// `sql` (one statement) dressed; `sql` itself when the scanner cannot read it.
    pub fn apply(&self, sql: &str) -> String {
        let Ok(scanned) = pg_query::scan(sql) else {
            return sql.to_owned();
        };
        let mut out = String::with_capacity(sql.len() + 64);
        out.push_str(self.leading.unwrap_or_default());
        let mut at = 0;
        for (i, token) in scanned.tokens.iter().enumerate() {
            let (start, end) = (token.start as usize, token.end as usize);
            let gap = &sql[at..start];
            if self.odd_spacing && !gap.is_empty() && gap.chars().all(char::is_whitespace) {
                out.push_str(if i % 2 == 0 { "  \n\t " } else { "\t  " });
            } else {
                out.push_str(gap);
            }
            let text = &sql[start..end];
            let keyword = token.keyword_kind != pg_query::protobuf::KeywordKind::NoKeyword as i32
                && text.chars().all(|c| c.is_ascii_alphabetic() || c == '_');
            if keyword {
                let mode = (self.case_seed >> (i % 60)) % 3;
                match mode {
                    0 => out.push_str(&text.to_ascii_uppercase()),
                    1 => out.push_str(&text.to_ascii_lowercase()),
                    _ => out.extend(text.chars().enumerate().map(|(j, c)| {
                        if j % 2 == 0 {
                            c.to_ascii_uppercase()
                        } else {
                            c.to_ascii_lowercase()
                        }
                    })),
                }
            } else {
                out.push_str(text);
            }
            if i + 1 == self.middle_after {
                out.push_str(" /* mid */ ");
            }
            at = end;
        }
        out.push_str(&sql[at..]);
        out.push_str(self.trailing.unwrap_or_default());
        out
    }
}

#[test]
fn disguises_keep_literals_and_identifiers() {
    use rand::SeedableRng;
    let mut rng = StdRng::seed_from_u64(7);
    let sql = "UPDATE \"T\" SET b = 'Update Me' WHERE id = $1 RETURNING id";
    for _ in 0..50 {
        let d = Disguise::draw(&mut rng);
        let dressed = d.apply(sql);
        assert!(
            dressed.contains("\"T\"") && dressed.contains("'Update Me'"),
            "{dressed}"
        );
        let a = pg_query::parse(sql, 0)
            .unwrap()
            .deparse(Default::default())
            .unwrap();
        let b = pg_query::parse(&dressed, 0)
            .unwrap()
            .deparse(Default::default())
            .unwrap();
        assert_eq!(a, b, "{dressed}");
    }
}
