//! Results: markdown tables, the targets with their measured ratios, and an SVG bar chart.

use std::fmt::Write as _;
use std::time::Duration;

/// The p-th percentile (0..=100) of `samples` (sorted in place).
pub fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort_unstable();
    let idx = ((p / 100.0) * (samples.len() - 1) as f64).round() as usize;
    samples[idx]
}

/// Jain's fairness index of per-client counts: 1.0 when all are equal, 1/n when one gets all.
pub fn jain(counts: &[u64]) -> f64 {
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let sq: f64 = counts.iter().map(|&c| (c as f64) * (c as f64)).sum();
    if sq == 0.0 {
        0.0
    } else {
        sum * sum / (counts.len() as f64 * sq)
    }
}

pub fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

/// A table's "rounds" cell: the rounds timed, and the void ones run again in their place (a
/// lease over before the benchmark could read it, on a stalled machine).
pub fn rounds(timed: usize, void: usize) -> String {
    match void {
        0 => timed.to_string(),
        n => format!("{timed} (+{n} void: the lease was over before it was read)"),
    }
}

pub struct Table {
    pub title: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(title: &str, headers: &[&str]) -> Table {
        Table {
            title: title.into(),
            headers: headers.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }
}

pub struct Target {
    pub what: String,
    pub measured: String,
    pub goal: String,
    pub met: bool,
}

/// One bar of the chart: a group (scenario), a series (protocol), a value.
pub struct Bar {
    pub group: String,
    pub series: String,
    pub value: f64,
}

#[derive(Default)]
pub struct Report {
    pub tables: Vec<Table>,
    pub targets: Vec<Target>,
    pub bars: Vec<Bar>,
    /// Mutual-exclusion violations seen by the critical-section checker.
    pub violations: u64,
}

impl Report {
    pub fn target(&mut self, what: &str, measured: String, goal: &str, met: bool) {
        self.targets.push(Target {
            what: what.into(),
            measured,
            goal: goal.into(),
            met,
        });
    }

    pub fn markdown(&self, header: &str) -> String {
        let mut out = String::new();
        writeln!(out, "{header}\n").unwrap();
        for t in &self.tables {
            writeln!(out, "### {}\n", t.title).unwrap();
            writeln!(out, "| {} |", t.headers.join(" | ")).unwrap();
            writeln!(out, "|{}", "---|".repeat(t.headers.len())).unwrap();
            for r in &t.rows {
                writeln!(out, "| {} |", r.join(" | ")).unwrap();
            }
            writeln!(out).unwrap();
        }
        if !self.targets.is_empty() {
            writeln!(
                out,
                "### Targets\n\n| target | measured | goal | |\n|---|---|---|---|"
            )
            .unwrap();
            for t in &self.targets {
                let mark = if t.met { "met" } else { "MISSED" };
                writeln!(
                    out,
                    "| {} | {} | {} | {} |",
                    t.what, t.measured, t.goal, mark
                )
                .unwrap();
            }
            writeln!(out).unwrap();
        }
        writeln!(out, "Mutual-exclusion violations: {}", self.violations).unwrap();
        out
    }

    /// A grouped bar chart (one group per scenario, one bar per protocol), values normalised
    /// to the largest bar of each group so different units share one axis; labels carry the
    /// absolute figures.
    pub fn svg(&self, title: &str) -> String {
        let mut groups: Vec<&str> = Vec::new();
        let mut series: Vec<&str> = Vec::new();
        for b in &self.bars {
            if !groups.contains(&b.group.as_str()) {
                groups.push(&b.group);
            }
            if !series.contains(&b.series.as_str()) {
                series.push(&b.series);
            }
        }
        let colors = ["#d1495b", "#edae49", "#00798c", "#30638e", "#6a4c93"];
        let (bar_w, gap, left, top, plot_h) = (26.0, 30.0, 40.0, 100.0, 260.0);
        let group_w = bar_w * series.len() as f64 + gap;
        let width = left + group_w * groups.len() as f64 + 20.0;
        let height = top + plot_h + 120.0;
        let mut s = String::new();
        writeln!(s, r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">"#).unwrap();
        writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#).unwrap();
        writeln!(
            s,
            r#"<text x="{left}" y="22" font-size="15" font-weight="bold">{}</text>"#,
            esc(title)
        )
        .unwrap();
        writeln!(s, r##"<text x="{left}" y="40" fill="#555">bar height relative to the best protocol of each group; labels are absolute values</text>"##).unwrap();
        for (gi, g) in groups.iter().enumerate() {
            let max = self
                .bars
                .iter()
                .filter(|b| b.group == *g)
                .map(|b| b.value)
                .fold(0.0, f64::max);
            let gx = left + gi as f64 * group_w;
            for (si, se) in series.iter().enumerate() {
                let Some(b) = self.bars.iter().find(|b| b.group == *g && b.series == *se) else {
                    continue;
                };
                let h = if max > 0.0 {
                    b.value / max * plot_h
                } else {
                    0.0
                };
                let x = gx + si as f64 * bar_w;
                let y = top + plot_h - h;
                writeln!(
                    s,
                    r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{h:.1}" fill="{}"/>"#,
                    bar_w - 3.0,
                    colors[si % colors.len()]
                )
                .unwrap();
                writeln!(s, r#"<text x="{:.1}" y="{:.1}" font-size="9" transform="rotate(-90 {:.1} {:.1})">{}</text>"#, x + 15.0, y - 4.0, x + 15.0, y - 4.0, human(b.value)).unwrap();
            }
            let label_y = top + plot_h + 16.0;
            writeln!(s, r#"<text x="{gx:.1}" y="{label_y:.1}">{}</text>"#, esc(g)).unwrap();
        }
        for (si, se) in series.iter().enumerate() {
            let y = top + plot_h + 40.0 + si as f64 * 16.0;
            writeln!(s, r#"<rect x="{left}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#, y - 10.0, colors[si % colors.len()], left + 18.0, y, esc(se)).unwrap();
        }
        s.push_str("</svg>\n");
        s
    }
}

fn human(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fairness_and_percentiles() {
        assert!((jain(&[5, 5, 5, 5]) - 1.0).abs() < 1e-9);
        assert!((jain(&[20, 0, 0, 0]) - 0.25).abs() < 1e-9);
        let mut v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&mut v, 50.0), Duration::from_millis(51));
        assert_eq!(percentile(&mut v, 99.0), Duration::from_millis(99));
    }
}
