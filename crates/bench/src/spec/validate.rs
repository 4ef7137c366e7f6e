//! Checking a spec's targets and services: each field's value, the commands they run, how
//! their readiness is told, and the names they must not share. Every error names its line and
//! field.

use super::*;

impl Cx<'_> {
    pub(super) fn validate(&self, raw: RawSpec) -> Result<Spec, SpecError> {
        let name = raw.name.unwrap_or_else(|| {
            self.file
                .file_stem()
                .map_or_else(|| "bench".to_string(), |s| s.to_string_lossy().into_owned())
        });
        let run_span = raw.run.span();
        let run = raw.run.into_inner();
        let duration = self.duration(&run.duration, "run.duration")?;
        if duration.is_zero() {
            return Err(self.err(
                &run.duration.span(),
                "run.duration",
                "must be more than 0 s",
            ));
        }
        if *run.rounds.get_ref() == 0 {
            return Err(self.err(&run.rounds.span(), "run.rounds", "must be at least 1"));
        }
        let levels = self.levels(&run.levels, "run.levels")?;
        let warmup = match &run.warmup {
            Some(w) => self.duration(w, "run.warmup")?,
            None => Duration::from_secs(2),
        };
        let pause = match &run.pause {
            Some(p) => self.duration(p, "run.pause")?,
            None => Duration::from_millis(500),
        };
        let foreign_max_pct = run.foreign_max.unwrap_or(10.0);
        if !(0.0..=10_000.0).contains(&foreign_max_pct) {
            return Err(self.err(
                &run_span,
                "run.foreign_max",
                "must be a CPU share in % (0–10000)",
            ));
        }

        let loader = match raw.loader {
            None => LoaderSettings {
                threads: 1,
                cpus: vec![],
                timeout: Duration::from_secs(8),
            },
            Some(l) => {
                let l = l.into_inner();
                let threads = match &l.threads {
                    Some(t) if *t.get_ref() == 0 => {
                        return Err(self.err(&t.span(), "loader.threads", "must be at least 1"))
                    }
                    Some(t) => *t.get_ref(),
                    None => 1,
                };
                let cpus = match &l.cpus {
                    Some(c) => self.cpus(c, "loader.cpus")?,
                    None => vec![],
                };
                let timeout = match &l.timeout {
                    Some(t) => self.duration(t, "loader.timeout")?,
                    None => Duration::from_secs(8),
                };
                LoaderSettings {
                    threads,
                    cpus,
                    timeout,
                }
            }
        };

        let targets_span = raw.targets.span();
        let raw_targets = raw.targets.into_inner();
        if raw_targets.is_empty() {
            return Err(self.err(&targets_span, "target", "at least one [[target]] is needed"));
        }
        let mut targets: Vec<Target> = Vec::new();
        for (i, t) in raw_targets.into_iter().enumerate() {
            let target = self.target(i, t)?;
            targets.push(target);
        }
        for (i, t) in targets.iter().enumerate() {
            if targets[..i].iter().any(|o| o.name == t.name) {
                return Err(self.err(
                    &targets_span,
                    format!("target[{i}].name"),
                    format!("duplicate target name {:?}", t.name),
                ));
            }
        }

        let mut services: Vec<Service> = Vec::new();
        for (i, sv) in raw.services.into_iter().enumerate() {
            let service = self.service(i, sv, &targets, &services, &raw.vars)?;
            services.push(service);
        }

        let baseline = match &run.baseline {
            Some(b) => {
                if !targets.iter().any(|t| &t.name == b.get_ref()) {
                    return Err(self.err(
                        &b.span(),
                        "run.baseline",
                        format!(
                            "no target named {:?}; targets: {}",
                            b.get_ref(),
                            names(&targets)
                        ),
                    ));
                }
                b.get_ref().clone()
            }
            None => targets[0].name.clone(),
        };

        let scen_span = raw.scenarios.span();
        let raw_scenarios = raw.scenarios.into_inner();
        if raw_scenarios.is_empty() {
            return Err(self.err(
                &scen_span,
                "scenario",
                "at least one [[scenario]] is needed",
            ));
        }
        let mut scenarios: Vec<Scenario> = Vec::new();
        for (i, s) in raw_scenarios.into_iter().enumerate() {
            let s = self.scenario(i, s, &targets, &levels)?;
            if scenarios.iter().any(|o| o.name == s.name) {
                return Err(self.err(
                    &scen_span,
                    format!("scenario[{i}].name"),
                    format!("duplicate scenario name {:?}", s.name),
                ));
            }
            scenarios.push(s);
        }

        let spec_dir = self
            .file
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let spec_dir = if spec_dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            spec_dir
        };
        Ok(Spec {
            name,
            description: raw.description,
            file: self.file.to_path_buf(),
            spec_dir,
            text: self.text.to_string(),
            vars: raw.vars,
            run: RunSettings {
                duration,
                rounds: *run.rounds.get_ref(),
                warmup,
                pause,
                levels,
                baseline,
                foreign_max_pct,
                retries: run.retries.unwrap_or(2),
            },
            loader,
            targets,
            services,
            scenarios,
        })
    }

    pub(super) fn target(&self, i: usize, t: Spanned<RawTarget>) -> Result<Target, SpecError> {
        let span = t.span();
        let t = t.into_inner();
        let f = |name: &str| format!("target[{i}].{name}");
        let name = t.name.get_ref().trim().to_string();
        if name.is_empty() || name.contains(['/', '\\', '\0']) {
            return Err(self.err(
                &t.name.span(),
                f("name"),
                "must be a non-empty name without slashes",
            ));
        }
        let launch = match (t.command, t.pid) {
            (Some(_), Some(p)) => {
                return Err(self.err(&p.span(), f("pid"), "give either command or pid, not both"));
            }
            (None, None) => {
                return Err(self.err(
                    &span,
                    f("command"),
                    "missing: give command (to start it) or pid (already running)",
                ));
            }
            (None, Some(p)) => {
                if !t.templates.is_empty() || t.cwd.is_some() || !t.env.is_empty() {
                    return Err(self.err(
                        &p.span(),
                        f("pid"),
                        "cwd, env and templates apply only to a started command",
                    ));
                }
                Launch::Pid(*p.get_ref())
            }
            (Some(c), None) => Launch::Command {
                argv: self.argv(&c, &f("command"))?,
                cwd: t.cwd,
                env: t.env,
                templates: t.templates,
            },
        };
        let url = t.url.get_ref().clone();
        if let Err(m) = check_url(&url) {
            return Err(self.err(&t.url.span(), f("url"), m));
        }
        let cpus = match &t.cpus {
            Some(c) => self.cpus(c, &f("cpus"))?,
            None => vec![],
        };
        let (ready, ready_timeout) = self.ready(t.ready, &f)?;
        let https = url.starts_with("https://");
        let tls = match t.tls {
            None => TargetTls::default(),
            Some(raw) if !https => {
                return Err(self.err(&raw.span(), f("tls"), "applies to https:// URLs only"));
            }
            Some(raw) => {
                let span = raw.span();
                let raw = raw.into_inner();
                if raw.insecure && raw.cacert.is_some() {
                    return Err(self.err(
                        &span,
                        f("tls"),
                        "give insecure = true or cacert, not both",
                    ));
                }
                TargetTls {
                    insecure: raw.insecure,
                    cacert: raw.cacert,
                }
            }
        };
        Ok(Target {
            name,
            role: Role::Target,
            launch,
            url,
            cpus,
            ready,
            ready_timeout,
            rss_exclude: t.rss_exclude,
            tls,
        })
    }

    /// One `[[service]]`: a command, the address it listens on, the CPUs it runs on (none of
    /// a target's: their busy time is the server's) and its readiness check.
    pub(super) fn service(
        &self,
        i: usize,
        raw: Spanned<RawService>,
        targets: &[Target],
        earlier: &[Service],
        vars: &BTreeMap<String, String>,
    ) -> Result<Service, SpecError> {
        let span = raw.span();
        let s = raw.into_inner();
        let f = |name: &str| format!("service[{i}].{name}");
        let name = s.name.get_ref().trim().to_string();
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(self.err(
                &s.name.span(),
                f("name"),
                "must be a non-empty name of letters, digits, _ and - (it names ${NAME_addr})",
            ));
        }
        if targets.iter().any(|t| t.name == name) || earlier.iter().any(|e| e.process.name == name)
        {
            return Err(self.err(
                &s.name.span(),
                f("name"),
                format!("{name:?} is already the name of a target or service (each has its own run directory)"),
            ));
        }
        let addr_var = format!("{name}_addr");
        if vars.contains_key(&addr_var) {
            return Err(self.err(
                &s.name.span(),
                f("name"),
                format!("[vars] already defines {addr_var}, which this service's address would be"),
            ));
        }
        let addr = s.addr.get_ref().trim().to_string();
        // Checked here when it holds no variable; otherwise once expanded, before the run.
        if !addr.contains("${") {
            if let Err(m) = check_addr(&addr) {
                return Err(self.err(&s.addr.span(), f("addr"), m));
            }
        }
        let cpus = match &s.cpus {
            Some(c) => self.cpus(c, &f("cpus"))?,
            None => {
                return Err(self.err(
                    &span,
                    f("cpus"),
                    "missing: the CPUs to pin it to, apart from the targets' (beside the loader on two cores: cpus = [1])",
                ))
            }
        };
        if let Some((t, c)) = targets
            .iter()
            .find_map(|t| t.cpus.iter().find(|c| cpus.contains(c)).map(|c| (t, c)))
        {
            return Err(self.err(
                &s.cpus.as_ref().map_or(span.clone(), Spanned::span),
                f("cpus"),
                format!(
                    "CPU {c} is target {:?}'s: the busy time of a target's CPUs is counted as the server's; pin the service elsewhere",
                    t.name
                ),
            ));
        }
        let (ready, ready_timeout) = self.ready(s.ready, &f)?;
        Ok(Service {
            process: Target {
                name,
                role: Role::Service,
                launch: Launch::Command {
                    argv: self.argv(&s.command, &f("command"))?,
                    cwd: s.cwd,
                    env: s.env,
                    templates: s.templates,
                },
                url: format!("http://{addr}"),
                cpus,
                ready,
                ready_timeout,
                rss_exclude: Vec::new(),
                tls: TargetTls::default(),
            },
            addr,
        })
    }

    /// A command: argv as a list, or one line run with `sh -c`.
    pub(super) fn argv(
        &self,
        c: &Spanned<RawCommand>,
        field: &str,
    ) -> Result<Vec<String>, SpecError> {
        let argv = match c.get_ref() {
            RawCommand::Shell(s) => vec!["sh".to_string(), "-c".to_string(), s.clone()],
            RawCommand::Argv(v) => v.clone(),
        };
        if argv.is_empty() || argv[0].trim().is_empty() {
            return Err(self.err(&c.span(), field, "is empty"));
        }
        Ok(argv)
    }

    /// The readiness check and its timeout (default: a TCP connection within 15 s).
    pub(super) fn ready(
        &self,
        ready: Option<Spanned<RawReady>>,
        f: &dyn Fn(&str) -> String,
    ) -> Result<(Readiness, Duration), SpecError> {
        Ok(match ready {
            None => (Readiness::Tcp, Duration::from_secs(15)),
            Some(r) => {
                let rspan = r.span();
                let r = r.into_inner();
                let timeout = match &r.timeout {
                    Some(d) => {
                        let t = self.duration(d, &f("ready.timeout"))?;
                        if t.is_zero() {
                            return Err(self.err(
                                &d.span(),
                                f("ready.timeout"),
                                "must be longer than 0 (the process gets this long to answer)",
                            ));
                        }
                        t
                    }
                    None => Duration::from_secs(15),
                };
                let ready = match (r.tcp, r.http) {
                    (Some(true), Some(h)) => {
                        return Err(self.err(
                            &h.span(),
                            f("ready.http"),
                            "give either tcp or http, not both",
                        ));
                    }
                    (_, Some(h)) => {
                        if !h.get_ref().starts_with('/') {
                            return Err(self.err(
                                &h.span(),
                                f("ready.http"),
                                "must be a path starting with /",
                            ));
                        }
                        Readiness::Http(h.into_inner())
                    }
                    (Some(false), None) => {
                        return Err(self.err(
                            &rspan,
                            f("ready.tcp"),
                            "a readiness check is needed: tcp = true or http = \"/path\"",
                        ));
                    }
                    (_, None) => Readiness::Tcp,
                };
                (ready, timeout)
            }
        })
    }
}
