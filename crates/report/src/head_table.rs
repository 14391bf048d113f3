//! The head table of a checkpoint as files: `heads.csv`, `heads.json`, `attention.png`,
//! `heads.html`, and as text for a terminal.

use std::path::Path;

use headlab_heads::{CompositionTable, DetectorRow, HeadReport, HeadRow};

use crate::ReportError;
use crate::explorer::{html_page, maps_png};

/// Writes `heads.csv`, `heads.json`, `composition.csv`, `detector.csv`, `attention.png` and
/// `heads.html` into `out`; `syntax` (a grammar run's `syntax.json`) adds the relation table
/// to `heads.html`.
pub fn write_head_report(
    out: &Path,
    title: &str,
    report: &HeadReport,
    syntax: Option<&serde_json::Value>,
) -> Result<(), ReportError> {
    std::fs::create_dir_all(out).map_err(|e| ReportError::write(out, e))?;
    let rows = &report.rows;
    crate::write(&out.join("heads.csv"), to_csv(rows))?;
    let json = serde_json::to_string_pretty(rows).expect("head rows serialise");
    crate::write(&out.join("heads.json"), json)?;
    crate::write(
        &out.join(COMPOSITION_FILE),
        composition_csv(&report.composition),
    )?;
    crate::write(&out.join(DETECTOR_FILE), detector_csv(&report.detector))?;
    maps_png(&out.join("attention.png"), &report.maps, rows)?;
    crate::write(
        &out.join("heads.html"),
        html_page(title, &report.maps, rows, syntax),
    )
}

/// The numeric columns: CSV header, terminal header and width, decimals in CSV and on the
/// terminal.
const COLUMNS: [(&str, &str, usize, usize, usize); 11] = [
    ("previous_token", "prev", 6, 4, 3),
    ("induction", "induct", 6, 4, 3),
    ("duplicate_token", "dup", 6, 4, 3),
    ("first_token", "first", 6, 4, 3),
    ("mean_distance", "dist", 6, 3, 2),
    ("entropy", "entr", 6, 4, 3),
    ("ablation_zero", "abl-zero", 8, 5, 4),
    ("ablation_mean", "abl-mean", 8, 5, 4),
    ("grad_importance", "grad", 8, 5, 4),
    ("copying", "copy", 6, 4, 3),
    ("ov_top1", "ov-top1", 7, 4, 3),
];

/// A row's values in [`COLUMNS`] order.
fn values(r: &HeadRow) -> [f64; 11] {
    let [a, b, c, d, e, f] = r.scores.values();
    [
        a,
        b,
        c,
        d,
        e,
        f,
        r.ablation_zero,
        r.ablation_mean,
        r.grad_importance,
        r.copying,
        r.ov_top1,
    ]
}

/// The composition scores beside the head table.
pub const COMPOSITION_FILE: &str = "composition.csv";

/// `composition.csv`: one row per mode and pair of heads in different layers (the earlier one
/// writes, the later one reads), with the score random heads of the same shapes get.
pub fn composition_csv(table: &CompositionTable) -> String {
    let mut out =
        String::from("mode,from_layer,from_head,to_layer,to_head,score,random_baseline\n");
    for c in &table.scores {
        let baseline = table.baseline[c.mode as usize];
        out += &format!(
            "{},{},{},{},{},{:.6},{baseline:.6}\n",
            c.mode.name(),
            c.from.0,
            c.from.1,
            c.to.0,
            c.to.1,
            c.score
        );
    }
    out
}

/// TransformerLens's detector scores beside the head table.
pub const DETECTOR_FILE: &str = "detector.csv";

/// `detector.csv`: each head's previous-token, duplicate-token and induction scores by
/// TransformerLens's `detect_head` rule, named as it names them.
pub fn detector_csv(rows: &[DetectorRow]) -> String {
    let mut out =
        String::from("layer,head,previous_token_head,duplicate_token_head,induction_head\n");
    for r in rows {
        out += &format!(
            "{},{},{:.6},{:.6},{:.6}\n",
            r.layer, r.head, r.previous_token, r.duplicate_token, r.induction
        );
    }
    out
}

/// The table as CSV.
pub fn to_csv(rows: &[HeadRow]) -> String {
    let mut out = String::from("layer,head,label");
    for (name, ..) in COLUMNS {
        out += &format!(",{name}");
    }
    out.push_str(",roles\n");
    for r in rows {
        out += &format!("{},{},{}", r.scores.layer, r.scores.head, r.label);
        // An undefined score (0/0: a head that writes nothing) is an empty cell, not NaN.
        for ((.., decimals, _), v) in COLUMNS.iter().zip(values(r)) {
            if v.is_finite() {
                out += &format!(",{v:.decimals$}");
            } else {
                out.push(',');
            }
        }
        out += &format!(",{}\n", r.roles.join(";"));
    }
    out
}

/// The table for a terminal.
pub fn to_table(rows: &[HeadRow]) -> String {
    let mut undefined = false;
    let mut out = format!("{:>5} {:>4}  {:<14}", "layer", "head", "label");
    for (_, short, width, ..) in COLUMNS {
        out += &format!(" {short:>width$}");
    }
    out.push('\n');
    for r in rows {
        out += &format!(
            "{:>5} {:>4}  {:<14}",
            r.scores.layer,
            r.scores.head,
            r.label.to_string()
        );
        for ((_, _, width, _, decimals), v) in COLUMNS.iter().zip(values(r)) {
            if v.is_finite() {
                out += &format!(" {v:>width$.decimals$}");
            } else {
                undefined = true;
                out += &format!(" {UNDEFINED:>width$}");
            }
        }
        if !r.roles.is_empty() {
            out += &format!("  {}", r.roles.join(", "));
        }
        out.push('\n');
    }
    if undefined {
        out += &format!(
            "{UNDEFINED}: undefined (0/0): the head writes nothing this score can measure, as \
             when its output is zero\n"
        );
    }
    out
}

/// What the terminal table prints for a score that is not a number.
const UNDEFINED: &str = "undef";

#[cfg(test)]
mod tests {
    use headlab_heads::{HeadLabel, PatternScores};

    use super::*;

    fn row() -> HeadRow {
        HeadRow {
            scores: PatternScores {
                layer: 1,
                head: 3,
                previous_token: 0.91234,
                induction: 0.5,
                duplicate_token: 0.25,
                first_token: 0.125,
                mean_distance: 2.345,
                entropy: 0.75,
            },
            ablation_zero: 0.123456,
            ablation_mean: -0.0001,
            grad_importance: 1.5,
            copying: -0.81234,
            ov_top1: 0.0625,
            label: HeadLabel::PreviousToken,
            roles: Vec::new(),
        }
    }

    /// The file format other tools read: column names and digits written out by hand.
    #[test]
    fn csv_has_the_documented_columns_and_digits() {
        let csv = to_csv(&[row()]);
        let mut lines = csv.lines();
        assert_eq!(
            lines.next().unwrap(),
            "layer,head,label,previous_token,induction,duplicate_token,first_token,\
             mean_distance,entropy,ablation_zero,ablation_mean,grad_importance,copying,ov_top1,roles"
        );
        assert_eq!(
            lines.next().unwrap(),
            "1,3,previous-token,0.9123,0.5000,0.2500,0.1250,2.345,0.7500,0.12346,-0.00010,1.50000,\
             -0.8123,0.0625,"
        );
        let mut two = row();
        two.roles = vec!["subject".into(), "determiner".into()];
        assert!(to_csv(&[two]).ends_with(",0.0625,subject;determiner\n"));
    }

    /// A 0/0 score (a head whose output is zero) reads as undefined, never NaN.
    #[test]
    fn an_undefined_score_is_said_so_not_nan() {
        let mut r = row();
        r.copying = f64::NAN;
        let table = to_table(&[r.clone(), row()]);
        assert!(!table.contains("NaN"), "{table}");
        let first = table.lines().nth(1).unwrap();
        assert!(first.contains("  undef "), "{table}");
        assert!(table.contains("undef: undefined (0/0)"), "{table}");
        assert!(!to_table(&[row()]).contains("undef"));
        let csv = to_csv(&[r]);
        assert!(!csv.contains("NaN"), "{csv}");
        assert!(csv.contains(",1.50000,,0.0625,"), "{csv}");
    }

    #[test]
    fn the_terminal_table_lines_up() {
        let table = to_table(&[row(), row()]);
        let widths: Vec<usize> = table.lines().map(str::len).collect();
        assert!(widths.iter().all(|&w| w == widths[0]), "{table}");
        assert!(
            table
                .lines()
                .nth(1)
                .unwrap()
                .ends_with(" 0.1235  -0.0001   1.5000 -0.812   0.062"),
            "{table}"
        );
    }
}
