//! Checking a spec's scenarios: what each sends (method, path, body, script, protocol), the
//! connection levels to sweep, durations and CPU lists.

use super::*;

impl Cx<'_> {
    pub(super) fn scenario(
        &self,
        i: usize,
        s: Spanned<RawScenario>,
        targets: &[Target],
        run_levels: &[u32],
    ) -> Result<Scenario, SpecError> {
        let s = s.into_inner();
        let f = |name: &str| format!("scenario[{i}].{name}");
        let name = s.name.get_ref().trim().to_string();
        if name.is_empty() {
            return Err(self.err(&s.name.span(), f("name"), "must not be empty"));
        }
        let path = s.path.get_ref().clone();
        if !path.starts_with('/') || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(self.err(
                &s.path.span(),
                f("path"),
                "must start with / and hold no spaces or control characters",
            ));
        }
        let method = match &s.method {
            Some(m) => {
                let m = m.get_ref().clone();
                if m.is_empty() || !m.bytes().all(|b| b.is_ascii_uppercase()) {
                    return Err(self.err(
                        &s.method.as_ref().map_or(0..0, Spanned::span),
                        f("method"),
                        "must be an upper-case HTTP method such as GET",
                    ));
                }
                m
            }
            None => "GET".to_string(),
        };
        for (k, v) in &s.headers {
            let bad_name = k.is_empty()
                || !k
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if bad_name || v.bytes().any(|b| b == b'\r' || b == b'\n') {
                return Err(SpecError {
                    file: self.file.to_path_buf(),
                    line: self.find_line(k),
                    field: Some(f(&format!("headers.{k}"))),
                    message: "header names are tokens and values hold no line breaks".into(),
                });
            }
            // The loader frames each request itself (from `body`).
            if k.eq_ignore_ascii_case("content-length")
                || k.eq_ignore_ascii_case("transfer-encoding")
            {
                return Err(SpecError {
                    file: self.file.to_path_buf(),
                    line: self.find_line(k),
                    field: Some(f(&format!("headers.{k}"))),
                    message: "the loader frames each request from its body; remove it".into(),
                });
            }
        }
        let pipeline = match &s.pipeline {
            Some(p) if *p.get_ref() == 0 || *p.get_ref() > MAX_PIPELINE => {
                return Err(self.err(
                    &p.span(),
                    f("pipeline"),
                    format!("must be 1–{MAX_PIPELINE} (1 = no pipelining)"),
                ));
            }
            Some(p) => *p.get_ref(),
            None => 1,
        };
        let keepalive = s.keepalive.unwrap_or(true);
        let h2 = match &s.h2 {
            Some(m) if *m.get_ref() == 0 || *m.get_ref() > 10_000 => {
                return Err(self.err(
                    &m.span(),
                    f("h2"),
                    "streams per connection: must be 1–10000",
                ));
            }
            Some(m) if pipeline > 1 || !keepalive => {
                return Err(self.err(
                    &m.span(),
                    f("h2"),
                    "HTTP/2 multiplexes streams on kept-alive connections: no pipeline, keepalive = true",
                ));
            }
            Some(m) => Some(*m.get_ref()),
            None => None,
        };
        let h3 = match &s.h3 {
            Some(m) if *m.get_ref() == 0 || *m.get_ref() > 10_000 => {
                return Err(self.err(
                    &m.span(),
                    f("h3"),
                    "streams per connection: must be 1–10000",
                ));
            }
            Some(m) if h2.is_some() => {
                return Err(self.err(
                    &m.span(),
                    f("h3"),
                    "a scenario is HTTP/2 or HTTP/3, not both",
                ));
            }
            Some(m) if pipeline > 1 || !keepalive => {
                return Err(self.err(
                    &m.span(),
                    f("h3"),
                    "HTTP/3 multiplexes streams on kept-alive connections: no pipeline, keepalive = true",
                ));
            }
            Some(m) => Some(*m.get_ref()),
            None => None,
        };
        if !keepalive && pipeline > 1 {
            return Err(self.err(
                &s.pipeline.as_ref().map_or(0..0, Spanned::span),
                f("pipeline"),
                "pipelining needs keepalive = true",
            ));
        }
        let chosen = match &s.targets {
            None => targets.iter().map(|t| t.name.clone()).collect(),
            Some(list) => {
                let mut out = Vec::new();
                for (j, t) in list.get_ref().iter().enumerate() {
                    if !targets.iter().any(|x| &x.name == t.get_ref()) {
                        return Err(self.err(
                            &t.span(),
                            f(&format!("targets[{j}]")),
                            format!(
                                "no target named {:?}; targets: {}",
                                t.get_ref(),
                                names(targets)
                            ),
                        ));
                    }
                    out.push(t.get_ref().clone());
                }
                if out.is_empty() {
                    return Err(self.err(
                        &list.span(),
                        f("targets"),
                        "is empty; leave it out to mean every target",
                    ));
                }
                out
            }
        };
        let levels = match &s.levels {
            Some(l) => self.levels(l, &f("levels"))?,
            None => run_levels.to_vec(),
        };
        Ok(Scenario {
            name,
            path,
            method,
            headers: s.headers.into_iter().collect(),
            body: s.body,
            pipeline,
            keepalive,
            targets: chosen,
            levels,
            tls_resume: s.tls_resume.unwrap_or(false),
            h2,
            h3,
        })
    }

    pub(super) fn duration(
        &self,
        d: &Spanned<RawDuration>,
        field: &str,
    ) -> Result<Duration, SpecError> {
        match d.get_ref() {
            RawDuration::Seconds(s) if s.is_finite() && *s >= 0.0 && *s < 1e7 => {
                Ok(Duration::from_secs_f64(*s))
            }
            RawDuration::Seconds(_) => Err(self.err(
                &d.span(),
                field,
                "must be a duration such as 10 (seconds), \"10s\" or \"500ms\"",
            )),
            RawDuration::Text(t) => parse_duration(t).ok_or_else(|| {
                self.err(
                    &d.span(),
                    field,
                    format!("{t:?} is not a duration; write e.g. \"10s\", \"500ms\", \"2m\""),
                )
            }),
        }
    }

    pub(super) fn cpus(&self, c: &Spanned<RawCpus>, field: &str) -> Result<Vec<usize>, SpecError> {
        let max = 4096;
        let list = match c.get_ref() {
            RawCpus::List(v) => v
                .iter()
                .map(|&n| usize::try_from(n).ok().filter(|&n| n < max))
                .collect::<Option<Vec<_>>>(),
            RawCpus::Text(t) => parse_cpu_list(t).filter(|v| v.iter().all(|&n| n < max)),
        };
        match list {
            Some(v) if !v.is_empty() => Ok(v),
            _ => Err(self.err(&c.span(), field, "must be CPU numbers: [0, 1] or \"0-3,6\"")),
        }
    }

    pub(super) fn levels(
        &self,
        l: &Spanned<RawLevels>,
        field: &str,
    ) -> Result<Vec<u32>, SpecError> {
        let bad = |m: String| self.err(&l.span(), field, m);
        let levels: Vec<i64> = match l.get_ref() {
            RawLevels::List(v) => v.clone(),
            RawLevels::Range(r) => {
                if r.step <= 0 {
                    return Err(bad("step must be at least 1".into()));
                }
                if r.to < r.from {
                    return Err(bad(format!("to ({}) is below from ({})", r.to, r.from)));
                }
                if (r.to - r.from) / r.step >= MAX_LEVELS as i64 {
                    return Err(bad(format!("more than {MAX_LEVELS} levels")));
                }
                // The seed sweeps "0–1000 step 10": a level of 0 connections measures nothing,
                // so a range starting at 0 starts at its first step instead.
                let from = if r.from == 0 { r.step } else { r.from };
                (from..=r.to)
                    .step_by(usize::try_from(r.step).unwrap_or(1))
                    .collect()
            }
        };
        if levels.is_empty() {
            return Err(bad("no connection levels".into()));
        }
        if levels.len() > MAX_LEVELS {
            return Err(bad(format!("more than {MAX_LEVELS} levels")));
        }
        let mut out = Vec::with_capacity(levels.len());
        for n in levels {
            match u32::try_from(n) {
                Ok(n) if (1..=MAX_CONNECTIONS).contains(&n) => out.push(n),
                _ => {
                    return Err(bad(format!(
                        "{n} connections: each level must be 1–{MAX_CONNECTIONS}"
                    )))
                }
            }
        }
        Ok(out)
    }
}
