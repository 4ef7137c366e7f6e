//! The report's table of system calls per request: a row per server and level, a column per
//! call the run counted; as Markdown for the terminal (the HTML page draws it itself).

use super::summary::Summary;

/// The report's table of system calls per request: one row per scenario × target × level,
/// a column per call that some server made.
#[derive(Debug, Clone, PartialEq)]
pub struct SyscallTable {
    /// The calls shown, in [`crate::syscalls::CALLS`] order: those some row made.
    pub columns: Vec<&'static str>,
    /// Calls counted in every row and made by none (left out of the columns).
    pub never_made: Vec<&'static str>,
    pub rows: Vec<SyscallTableRow>,
}

/// One row of [`SyscallTable`].
#[derive(Debug, Clone, PartialEq)]
pub struct SyscallTableRow {
    pub scenario: String,
    pub target: String,
    pub connections: u32,
    /// Total, each column, other — formatted; or why nothing was counted.
    pub cells: Result<Vec<String>, String>,
}

/// The syscall table of a summary; `None` when no row has syscall figures or a reason.
#[must_use]
pub fn syscall_table(summary: &Summary) -> Option<SyscallTable> {
    let points = || {
        summary.iter().flat_map(|(sc, per_target)| {
            per_target
                .iter()
                .flat_map(move |(t, ps)| ps.iter().map(move |p| (sc, t, p)))
        })
    };
    if points().all(|(_, _, p)| p.syscalls.is_none() && p.syscalls_unavailable.is_none()) {
        return None;
    }
    let mut columns = Vec::new();
    let mut never_made = Vec::new();
    for call in crate::syscalls::CALLS {
        let figures: Vec<Option<f64>> = points()
            .filter_map(|(_, _, p)| p.syscalls.as_ref())
            .map(|s| s.call(call.name))
            .collect();
        // Shown when some row made it; "never made" only when every row could count it.
        if figures.iter().flatten().any(|v| *v >= 0.0005) {
            columns.push(call.name);
        } else if !figures.is_empty() && figures.iter().all(Option::is_some) {
            never_made.push(call.name);
        }
    }
    let rows = points()
        .map(|(sc, t, p)| SyscallTableRow {
            scenario: sc.clone(),
            target: t.clone(),
            connections: p.connections,
            cells: match (&p.syscalls, &p.syscalls_unavailable) {
                (Some(s), _) => {
                    let mut v = vec![format!("{:.3}", s.total)];
                    v.extend(
                        columns
                            .iter()
                            .map(|c| s.call(c).map_or_else(|| "–".into(), |x| format!("{x:.3}"))),
                    );
                    v.push(format!("{:.3}", s.other));
                    Ok(v)
                }
                (None, Some(why)) => Err(format!("not counted: {why}")),
                (None, None) => Err("not counted".into()),
            },
        })
        .collect();
    Some(SyscallTable {
        columns,
        never_made,
        rows,
    })
}

/// The syscall table as Markdown (what `lowlat bench report` prints), with a line on what was
/// left out.
#[must_use]
pub fn syscall_table_text(t: &SyscallTable) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = write!(s, "| scenario | target | conns | total |");
    for c in &t.columns {
        let _ = write!(s, " {c} |");
    }
    let _ = writeln!(s, " other |");
    let _ = writeln!(s, "|---|---|---|---|{}---|", "---|".repeat(t.columns.len()));
    for r in &t.rows {
        let _ = write!(s, "| {} | {} | {} |", r.scenario, r.target, r.connections);
        match &r.cells {
            Ok(cells) => {
                for c in cells {
                    let _ = write!(s, " {c} |");
                }
            }
            Err(why) => {
                let _ = write!(s, " {why} |{}", " |".repeat(t.columns.len() + 1));
            }
        }
        s.push('\n');
    }
    if !t.never_made.is_empty() {
        let _ = writeln!(
            s,
            "\nCounted and made by no server: {}.",
            t.never_made.join(", ")
        );
    }
    s
}
