//! `headlab sweep`: one run per point of a grid of config settings (`--grid
//! model.n_heads=1,2,4 --grid train.seed=1337,1`), each in a folder named by its settings,
//! then a results table over them all.
//!
//! The sweep folder holds `sweep.json` (what was asked: the base config's text, the `--set`s
//! and the axes, [`SweepSpec`]), one run folder per point, and once every run is done
//! `results.csv` ([`RESULTS_HEADER`]), `results.md`, `losses.png` (every run's val loss) and
//! `results.html` (the table, sortable, and the picture). A point is trained by
//! [`run_point`] wherever it runs (this process, or a Slurm array task given its index), so
//! the run folders are the same whichever launcher ran them.

use std::fmt::Write as _;
use std::path::Path;

use headlab_heads::syntax_report::{measure, syntax_json};
use headlab_report::plot::{Series, line_chart};
use headlab_report::report_run;
use headlab_train::config::{ConfigError, RunConfig};
use headlab_train::metrics::read_losses;
use serde::{Deserialize, Serialize};

use crate::{LabError, Runs, open, train_run, write};

/// What the sweep folder keeps of the request.
pub const SWEEP_FILE: &str = "sweep.json";

/// Written into a run's folder when its point is done (trained, measured, drawn): the point's
/// index and settings. A run with its `result.json` but not this is still being measured.
pub const POINT_FILE: &str = "sweep-point.json";

/// One axis of the grid: a config key and the values it takes, in the order given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Axis {
    pub key: String,
    pub values: Vec<String>,
}

/// A sweep: the base config (as TOML text, so the sweep folder says it all), the `--set`s on
/// it, and the axes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepSpec {
    /// Where the base config came from (a path, or "defaults").
    pub base_name: String,
    /// Its text.
    pub base: String,
    /// `--set`s applied to every point before its own settings.
    pub sets: Vec<String>,
    pub axes: Vec<Axis>,
    /// How run folders are named, `{KEY}` standing for the point's value of axis KEY (a lab's
    /// `h{model.n_heads}-s{train.seed}`); without it, `KEY-VALUE` per axis joined by `__`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<String>,
    /// The lab whose runs these are, where a run is more than its config (lab symmetry's
    /// starts): the one axis, [`LAB_RUN`], names a run of the lab, trained as the lab trains
    /// it, and `headlab lab NAME --resume` measures them all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lab: Option<String>,
}

/// The axis of a lab's sweep ([`SweepSpec::lab`]): which of the lab's runs a point is.
pub const LAB_RUN: &str = "run";

/// One run of the sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    /// Its folder's name: `key-value` per axis, joined by `__` (`model.n_heads-2__train.seed-1`).
    pub name: String,
    /// `key=value` per axis.
    pub sets: Vec<String>,
}

/// Parses `--grid KEY=V1,V2,...`.
pub fn parse_axis(text: &str) -> Result<Axis, LabError> {
    let bad = |why: &'static str| LabError::Setting {
        flag: "--grid",
        value: text.to_string(),
        why,
    };
    let (key, values) = text
        .split_once('=')
        .ok_or_else(|| bad("is not KEY=V1,V2,... (e.g. model.n_heads=1,2,4)"))?;
    let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
    if key.trim().is_empty() || values.iter().any(String::is_empty) {
        return Err(bad(
            "has an empty key or value: give KEY=V1,V2,... with no empty value",
        ));
    }
    Ok(Axis {
        key: key.trim().to_string(),
        values,
    })
}

/// What a `[sweep]` table may hold besides `grid`: the launcher's settings, which the
/// command's flags override.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepOptions {
    /// `local` or `slurm`.
    pub launcher: Option<String>,
    /// Runs at once (local).
    pub jobs: Option<usize>,
    /// Slurm's `--partition`, `--time`, `--mem`, `--cpus-per-task`, and extra `#SBATCH` lines.
    pub partition: Option<String>,
    pub time: Option<String>,
    pub mem: Option<String>,
    pub cpus_per_task: Option<usize>,
    #[serde(default)]
    pub sbatch: Vec<String>,
}

/// A config file as a sweep's base. Its `[sweep]` table, if any, is taken out: `grid` (a
/// table of config keys, each with its list of values) gives the axes, in the table's key
/// order, and the rest the launcher's settings ([`SweepOptions`]). The rest of the file is
/// the runs' config, its relative `data.path` resolved as `headlab train --config` resolves
/// it; returned as TOML text, so `sweep.json` holds it whole.
pub fn from_file(path: &Path) -> Result<(String, Vec<Axis>, SweepOptions), LabError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| LabError::File {
        action: "read",
        path: path.to_path_buf(),
        source,
    })?;
    let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        LabError::Config(ConfigError::Parse {
            source_name: name.clone(),
            hint: None,
            source: Box::new(e),
        })
    })?;
    let bad = |why: String| LabError::SweepTable {
        path: path.to_path_buf(),
        why,
    };
    let (axes, options) = match table.remove("sweep") {
        None => (Vec::new(), SweepOptions::default()),
        Some(toml::Value::Table(mut sweep)) => {
            let grid = match sweep.remove("grid") {
                None => toml::Table::new(),
                Some(toml::Value::Table(grid)) => grid,
                Some(_) => {
                    return Err(bad("[sweep] grid must be a table of KEY = [values]".into()));
                }
            };
            let mut axes = Vec::new();
            for (key, values) in grid {
                let toml::Value::Array(values) = values else {
                    return Err(bad(format!("[sweep] grid: {key} must be a list of values")));
                };
                if values.is_empty() {
                    return Err(bad(format!(
                        "[sweep] grid: {key} = [] has no values; give at least one, e.g. \
                         {key} = [1, 2]"
                    )));
                }
                let values = values
                    .into_iter()
                    .map(|v| match v {
                        toml::Value::String(s) => Ok(s),
                        toml::Value::Integer(_)
                        | toml::Value::Float(_)
                        | toml::Value::Boolean(_) => Ok(v.to_string()),
                        other => Err(bad(format!(
                            "[sweep] grid: {key} has {other}, not a number, word or true/false"
                        ))),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                axes.push(Axis { key, values });
            }
            let options: SweepOptions =
                toml::Value::Table(sweep)
                    .try_into()
                    .map_err(|e: toml::de::Error| {
                        bad(format!("[sweep]: {} (or grid)", e.message().trim()))
                    })?;
            (axes, options)
        }
        Some(_) => return Err(bad("sweep must be a table, [sweep]".into())),
    };
    let rest = toml::to_string(&table).expect("a parsed table serialises");
    let mut config = RunConfig::from_toml_str(&rest, &name)?;
    if let (Some(data), Ok(cwd)) = (&config.data.path, std::env::current_dir()) {
        config.data.path = Some(headlab_train::config::resolve_data_path(data, path, &cwd));
    }
    Ok((config.to_toml_string()?, axes, options))
}

impl SweepSpec {
    /// Every point, the first axis varying slowest.
    pub fn points(&self) -> Vec<Point> {
        let mut points = vec![Point {
            name: String::new(),
            sets: Vec::new(),
        }];
        for axis in &self.axes {
            points = points
                .into_iter()
                .flat_map(|p| {
                    axis.values.iter().map(move |v| {
                        let part = format!("{}-{v}", axis.key);
                        Point {
                            name: if p.name.is_empty() {
                                part
                            } else {
                                format!("{}__{part}", p.name)
                            },
                            sets: p
                                .sets
                                .iter()
                                .cloned()
                                .chain([format!("{}={v}", axis.key)])
                                .collect(),
                        }
                    })
                })
                .collect();
        }
        if let Some(format) = &self.names {
            for p in &mut points {
                let mut name = format.clone();
                for set in &p.sets {
                    if let Some((key, value)) = set.split_once('=') {
                        name = name.replace(&format!("{{{key}}}"), value);
                    }
                }
                p.name = name;
            }
        }
        points
    }

    /// The config of `point`: the base, the `--set`s, the point's settings, validated.
    pub fn config(&self, point: &Point) -> Result<RunConfig, LabError> {
        let mut config = RunConfig::from_toml_str(&self.base, &self.base_name)?;
        config.apply_sets(&self.sets)?;
        // A lab's point names one of its runs, which sets what it needs itself.
        let sets: Vec<String> = point
            .sets
            .iter()
            .filter(|s| self.lab.is_none() || !s.starts_with(&format!("{LAB_RUN}=")))
            .cloned()
            .collect();
        // The point's settings came from --grid (or the [sweep] table): say so.
        config
            .apply_sets(&sets)
            .map_err(|e| LabError::Grid(e.to_string().replacen("--set ", "--grid ", 1)))?;
        config.validate().map_err(ConfigError::from)?;
        Ok(config)
    }

    /// Refuses an empty grid, an axis with no values or given twice, a `--set` of an axis's
    /// key, a value with a character that cannot go in
    /// a folder name, and any point whose config is invalid (naming the key, as `--set` does).
    pub fn check(&self) -> Result<Vec<Point>, LabError> {
        if self.axes.is_empty() {
            return Err(LabError::Setting {
                flag: "--grid",
                value: "KEY=V1,V2,...".into(),
                why: "is missing: a sweep needs at least one axis, e.g. --grid \
                      model.n_heads=1,2,4",
            });
        }
        for (i, a) in self.axes.iter().enumerate() {
            if a.values.is_empty() {
                return Err(LabError::Setting {
                    flag: "--grid",
                    value: a.key.clone(),
                    why: "has no values: give each axis at least one, e.g. --grid \
                          model.n_heads=1,2,4",
                });
            }
            if self.axes[..i].iter().any(|b| b.key == a.key) {
                return Err(LabError::Setting {
                    flag: "--grid",
                    value: a.key.clone(),
                    why: "is given twice: give each key one --grid with all its values",
                });
            }
            if let Some(v) = a
                .values
                .iter()
                .find(|v| v.contains(['/', '\\']) || v.contains("__"))
            {
                return Err(LabError::Setting {
                    flag: "--grid",
                    value: format!("{}={v}", a.key),
                    why: "names a run folder, so it may not hold '/', '\\' or '__'",
                });
            }
        }
        // A --set of an axis's key would be overridden at every point: refuse it.
        for set in &self.sets {
            let key = set.split_once('=').map_or(set.as_str(), |(k, _)| k).trim();
            if self.axes.iter().any(|a| a.key == key) {
                return Err(LabError::SetOnAxis {
                    set: set.clone(),
                    key: key.to_string(),
                });
            }
        }
        let points = self.points();
        for p in &points {
            self.config(p)?;
        }
        Ok(points)
    }

    /// Reads the sweep folder's `sweep.json`; a run folder, a file or a missing folder is
    /// named for what it is.
    pub fn read(dir: &Path) -> Result<Self, LabError> {
        let path = dir.join(SWEEP_FILE);
        let no_sweep = |why: String| LabError::NoSweep {
            dir: dir.to_path_buf(),
            why,
        };
        if dir.is_file() {
            return Err(no_sweep(
                "it is a file; give the folder `headlab sweep --out` made (it holds sweep.json)"
                    .into(),
            ));
        }
        if !dir.is_dir() {
            return Err(no_sweep(
                "no such folder; give the folder `headlab sweep --out` made (it holds \
                 sweep.json)"
                    .into(),
            ));
        }
        if !path.exists() {
            let why = if dir.join("config.toml").is_file() {
                "it is a run folder (it holds config.toml); give the sweep folder that holds \
                 sweep.json, e.g. runs/sweep"
            } else {
                "it holds no sweep.json; give the folder `headlab sweep --out` made"
            };
            return Err(no_sweep(why.into()));
        }
        let text = std::fs::read_to_string(&path).map_err(|source| LabError::File {
            action: "read",
            path: path.clone(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|e| LabError::NotASweep {
            path,
            why: e.to_string(),
        })
    }

    /// Writes `sweep.json` into `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), LabError> {
        let text = serde_json::to_string_pretty(self).expect("a spec serialises");
        write(&dir.join(SWEEP_FILE), &(text + "\n"))
    }
}

/// Trains point `index` of the sweep in `dir` (reusing a finished run, continuing a stopped
/// one with `runs.resume`), then, on the grammar corpus, measures its syntactic heads into
/// `heads/` and draws its page. The same whichever launcher calls it.
pub fn run_point(
    dir: &Path,
    spec: &SweepSpec,
    index: usize,
    runs: Runs<'_>,
) -> Result<(), LabError> {
    let points = spec.points();
    let point = points.get(index).ok_or_else(|| LabError::Setting {
        flag: "--point",
        value: index.to_string(),
        why: "is not a point of this sweep",
    })?;
    let config = spec.config(point)?;
    let run_dir = dir.join(&point.name);
    headlab_train::log_line!(
        "sweep: run {}/{}: {}",
        index + 1,
        points.len(),
        point.sets.join(" ")
    );
    let done = |index: usize| {
        let json = serde_json::json!({ "point": index, "sets": point.sets });
        write(&run_dir.join(POINT_FILE), &(json.to_string() + "\n"))
    };
    match spec.lab.as_deref() {
        None => {}
        Some("symmetry") => {
            crate::symmetry::train_named(&config, dir, &point.name, runs)?;
            return done(index);
        }
        Some(other) => {
            return Err(LabError::NotASweep {
                path: dir.join(SWEEP_FILE),
                why: format!("lab {other} does not train its runs as a sweep"),
            });
        }
    }
    train_run(config, run_dir.clone(), runs)?;
    let (trained, device, data) = open(&run_dir)?;
    let heads = run_dir.join("heads");
    std::fs::create_dir_all(&heads).map_err(|source| LabError::File {
        action: "write",
        path: heads.clone(),
        source,
    })?;
    if let Some(report) = measure(
        &trained.config,
        &data,
        &trained.tokenizer,
        &trained.model,
        &device,
        &heads,
    )? {
        let json = serde_json::to_string_pretty(&syntax_json(&report)).expect("json");
        write(&heads.join("syntax.json"), &(json + "\n"))?;
    }
    report_run(&run_dir)?;
    done(index)
}

/// `results.csv`'s header, after `name` and one column per axis (its key): `train_loss` and
/// `val_loss` (the run's last evaluation), `well_formed` and `agreeing` (its last evaluation's
/// sampled-sentence shares, on the grammar corpus; empty otherwise), `syntactic_head`
/// (`layer.head`, the head that beats its fixed-offset rule by the most; empty where none
/// does or off the grammar), its `relation`, `accuracy` and `baseline` (the rule's
/// accuracy), and `train_s` (seconds of training steps, the one column that differs from
/// machine to machine).
pub const RESULTS_HEADER: &str = "train_loss,val_loss,well_formed,agreeing,syntactic_head,\
     relation,accuracy,baseline,train_s";

/// One finished run's row.
#[derive(Debug, Clone)]
pub struct Row {
    pub point: Point,
    pub train_loss: f64,
    pub val_loss: f64,
    pub grammar: Option<(f64, f64)>,
    /// Head, relation, accuracy, baseline.
    pub syntactic: Option<(String, String, f64, f64)>,
    pub train_s: f64,
    /// `(step, val loss)` at every evaluation.
    pub curve: Vec<(usize, f64)>,
}

/// Where each point stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Finished: trained and measured ([`POINT_FILE`] written).
    Done,
    /// Started, not finished (running, or stopped).
    Started,
    /// Nothing yet.
    NotStarted,
}

/// Where point `p` of the sweep in `dir` stands.
pub fn state(dir: &Path, p: &Point) -> State {
    let run = dir.join(&p.name);
    if run.join(POINT_FILE).is_file() {
        State::Done
    } else if run.exists() {
        State::Started
    } else {
        State::NotStarted
    }
}

/// Reads every point's results; `Err` names the points not finished.
pub fn collect(dir: &Path, spec: &SweepSpec) -> Result<Vec<Row>, LabError> {
    let points = spec.points();
    let missing: Vec<String> = points
        .iter()
        .filter(|p| state(dir, p) != State::Done)
        .map(|p| p.name.clone())
        .collect();
    if !missing.is_empty() {
        return Err(LabError::Unfinished {
            dir: dir.to_path_buf(),
            runs: missing,
        });
    }
    points.into_iter().map(|p| row(dir, p)).collect()
}

/// The results of the finished run of `point`.
fn row(dir: &Path, point: Point) -> Result<Row, LabError> {
    let run = dir.join(&point.name);
    let read = |name: &str| -> Result<String, LabError> {
        let path = run.join(name);
        std::fs::read_to_string(&path).map_err(|source| LabError::File {
            action: "read",
            path,
            source,
        })
    };
    let result: serde_json::Value =
        serde_json::from_str(&read("result.json")?).map_err(|e| LabError::NotASweep {
            path: run.join("result.json"),
            why: e.to_string(),
        })?;
    let number = |key: &str| result[key].as_f64().unwrap_or(f64::NAN);
    let losses = read_losses(&run.join("metrics.csv"));
    let grammar = losses.grammar.last().map(|&(_, w, a)| (w, a));
    let syntactic = std::fs::read_to_string(run.join("heads/syntax.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|json| {
            let name = json["syntactic"].as_str()?.to_string();
            let (l, h) = name.split_once('.')?;
            let (l, h): (u64, u64) = (l.parse().ok()?, h.parse().ok()?);
            let best = json["relations"]
                .as_array()?
                .iter()
                .filter(|r| r["layer"].as_u64() == Some(l) && r["head"].as_u64() == Some(h))
                .filter_map(|r| {
                    let acc = r["accuracy"].as_f64()?;
                    let base = r["baseline"]["accuracy"].as_f64()?;
                    Some((r["relation"].as_str()?.to_string(), acc, base))
                })
                .max_by(|a, b| (a.1 - a.2).total_cmp(&(b.1 - b.2)))?;
            Some((name, best.0, best.1, best.2))
        });
    let curve = losses
        .evals
        .iter()
        .map(|&(step, _, val)| (step, val))
        .collect();
    Ok(Row {
        point,
        train_loss: number("train_loss"),
        val_loss: number("val_loss"),
        grammar,
        syntactic,
        train_s: number("train_s"),
        curve,
    })
}

/// `results.csv`: `name`, the axes, then [`RESULTS_HEADER`].
pub fn results_csv(spec: &SweepSpec, rows: &[Row]) -> String {
    let axes: Vec<&str> = spec.axes.iter().map(|a| a.key.as_str()).collect();
    let mut s = format!("name,{},{RESULTS_HEADER}\n", axes.join(","));
    for r in rows {
        let values: Vec<&str> = r
            .point
            .sets
            .iter()
            .map(|set| set.split_once('=').map_or("", |(_, v)| v))
            .collect();
        let (w, a) = r.grammar.map_or((String::new(), String::new()), |(w, a)| {
            (format!("{w:.4}"), format!("{a:.4}"))
        });
        let syn = r
            .syntactic
            .as_ref()
            .map_or(",,,".to_string(), |(h, rel, acc, base)| {
                format!("{h},{rel},{acc:.4},{base:.4}")
            });
        let _ = writeln!(
            s,
            "{},{},{:.6},{:.6},{w},{a},{syn},{:.1}",
            r.point.name,
            values.join(","),
            r.train_loss,
            r.val_loss,
            r.train_s
        );
    }
    s
}

/// `results.md`: the same table in markdown.
pub fn results_md(spec: &SweepSpec, rows: &[Row]) -> String {
    let csv = results_csv(spec, rows);
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    let mut s = format!(
        "# sweep\n\nBase config: {}{}. {}.\n\n| {} |\n|{}\n",
        spec.base_name,
        if spec.sets.is_empty() {
            String::new()
        } else {
            format!(" with {}", spec.sets.join(" "))
        },
        runs(rows.len()),
        header.join(" | "),
        "---|".repeat(header.len())
    );
    for line in lines {
        let _ = writeln!(s, "| {} |", line.split(',').collect::<Vec<_>>().join(" | "));
    }
    s
}

/// `results.html`: the table (click a heading to sort by it) under every run's val loss
/// curve (`losses.png`). Self-contained but for the picture beside it.
pub fn results_html(spec: &SweepSpec, rows: &[Row]) -> String {
    let csv = results_csv(spec, rows);
    let escape = |t: &str| {
        t.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let mut lines = csv.lines();
    let header = lines.next().unwrap_or("");
    let mut table = String::from("<table id=\"results\"><thead><tr>");
    for h in header.split(',') {
        let _ = write!(table, "<th>{}</th>", escape(h));
    }
    table += "</tr></thead><tbody>";
    for line in lines {
        table += "<tr>";
        for v in line.split(',') {
            let _ = write!(table, "<td>{}</td>", escape(v));
        }
        table += "</tr>";
    }
    table += "</tbody></table>";
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>headlab sweep</title>\
         <style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}\
         th,td{{border:1px solid #ccc;padding:4px 8px;text-align:right}}th{{cursor:pointer;\
         background:#f4f4f4}}</style></head><body><h1>headlab sweep</h1><p>Base config: {} \
         {}. {}; click a column's heading to sort by it.</p><img src=\"losses.png\" \
         alt=\"every run's val loss\" width=\"900\">{table}<script>\
         document.querySelectorAll('#results th').forEach((th,i)=>th.onclick=()=>{{\
         const body=document.querySelector('#results tbody');\
         const rows=[...body.rows];const up=th.dataset.up!=='1';th.dataset.up=up?'1':'0';\
         const key=r=>{{const t=r.cells[i].textContent;const n=parseFloat(t);\
         return isNaN(n)?t:n}};rows.sort((a,b)=>{{const x=key(a),y=key(b);\
         return (x<y?-1:x>y?1:0)*(up?1:-1)}});rows.forEach(r=>body.appendChild(r))}});\
         </script></body></html>\n",
        escape(&spec.base_name),
        escape(&spec.sets.join(" ")),
        runs(rows.len()),
    )
}

/// "1 run", "4 runs".
pub fn runs(n: usize) -> String {
    if n == 1 {
        "1 run".into()
    } else {
        format!("{n} runs")
    }
}

/// Writes the results files into `dir` and returns the markdown table.
pub fn write_results(dir: &Path, spec: &SweepSpec, rows: &[Row]) -> Result<String, LabError> {
    write(&dir.join("results.csv"), &results_csv(spec, rows))?;
    let md = results_md(spec, rows);
    write(&dir.join("results.md"), &md)?;
    write(&dir.join("results.html"), &results_html(spec, rows))?;
    let series: Vec<Series> = rows
        .iter()
        .map(|r| Series {
            label: r.point.sets.join(" "),
            points: r.curve.iter().map(|&(s, l)| (s as f64, l)).collect(),
            faint: false,
        })
        .collect();
    line_chart(
        &dir.join("losses.png"),
        "val loss of every run",
        "step",
        "val loss",
        &series,
    )?;
    Ok(md)
}

/// Runs every point not finished yet, one after another, in this process.
pub fn run_local(dir: &Path, spec: &SweepSpec, runs: Runs<'_>) -> Result<String, LabError> {
    for index in 0..spec.points().len() {
        run_point(dir, spec, index, runs)?;
    }
    let rows = collect(dir, spec)?;
    write_results(dir, spec, &rows)
}
