//! The PHP front door's flags (`--php` and its companions, per `[[site]]` in a config file) and
//! the settings every worker shares, checked once at start by the settings layer.

use std::path::PathBuf;
use std::sync::Arc;

use crate::proxy::cgi_request::ServerVars;
use crate::proxy::config::InternalLocation;

/// Flags of `lowlat serve` for a PHP application.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "PHP")]
pub struct PhpArgs {
    /// Serve a PHP application from --root through php-fpm at this address: unix:/PATH,
    /// HOST:PORT, fastcgi://HOST:PORT, or the name of an [[upstream]] group of fastcgi://
    /// servers (static files are served directly, *.php and the front controller by php-fpm)
    #[arg(long, value_name = "ADDRESS", value_parser = parse_php_target)]
    pub php: Option<String>,
    /// The script that answers for a directory, and the front controller at the root for paths
    /// that name no file (try_files $uri $uri/ /index.php?$args)
    #[arg(long = "php-index", value_name = "NAME", default_value = "index.php", value_parser = parse_index)]
    pub php_index: String,
    /// A path that names no file is 404 instead of going to the front controller (a site of
    /// plain scripts)
    #[arg(long = "php-no-front-controller")]
    pub php_no_front_controller: bool,
    /// A FastCGI parameter set on every PHP request, over the CGI/1.1 variables, as nginx's
    /// fastcgi_param (repeatable; e.g. APP_ENV=production)
    #[arg(long = "php-param", value_name = "NAME=VALUE", value_parser = crate::proxy::cgi_request::parse_fastcgi_param)]
    pub php_param: Vec<(String, String)>,
    /// An internal location, as nginx's `location PREFIX { internal; alias DIR; }`: a response
    /// with X-Accel-Redirect: PREFIX/file is answered with DIR/file, and one with X-Sendfile:
    /// PATH with that file if it lies under DIR; clients cannot ask for PREFIX themselves
    /// (repeatable)
    #[arg(long = "php-internal", value_name = "PREFIX=DIR", value_parser = parse_internal)]
    pub php_internal: Vec<(String, PathBuf)>,
}

fn parse_php_target(text: &str) -> Result<String, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("--php: an address (unix:/run/php/php-fpm.sock, 127.0.0.1:9000) or an [[upstream]] group's name".into());
    }
    if let Some(path) = t.strip_prefix("unix:") {
        if !path.starts_with('/') {
            return Err(format!(
                "{text:?}: a Unix socket's path is absolute (unix:/run/php/php-fpm.sock)"
            ));
        }
    }
    Ok(t.to_owned())
}

fn parse_index(text: &str) -> Result<String, String> {
    if !text.ends_with(".php") || text.contains(['/', '\\', '\0']) || text.starts_with('.') {
        return Err(format!(
            "{text:?}: the index is a plain file name ending in .php (index.php)"
        ));
    }
    Ok(text.to_owned())
}

fn parse_internal(text: &str) -> Result<(String, PathBuf), String> {
    let (prefix, dir) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not PREFIX=DIR (e.g. /protected/=/srv/private)"))?;
    if !prefix.starts_with('/')
        || prefix.contains(['?', '#', '%', ' '])
        || prefix.split('/').any(|seg| seg == "." || seg == "..")
    {
        return Err(format!(
            "{text:?}: the prefix is a path such as /protected/"
        ));
    }
    if !dir.starts_with('/') {
        return Err(format!("{text:?}: the directory is an absolute path"));
    }
    let prefix = if prefix.ends_with('/') {
        prefix.to_owned()
    } else {
        format!("{prefix}/")
    };
    Ok((prefix, PathBuf::from(dir)))
}

impl PhpArgs {
    /// The internal locations, their directories made canonical.
    ///
    /// # Errors
    /// A directory that does not exist.
    pub fn internal(&self) -> Result<Vec<InternalLocation>, String> {
        self.php_internal
            .iter()
            .map(|(prefix, dir)| {
                let dir = std::fs::canonicalize(dir)
                    .map_err(|e| format!("--php-internal {prefix}={}: {e}", dir.display()))?;
                if !dir.is_dir() {
                    return Err(format!(
                        "--php-internal {prefix}={}: not a directory",
                        dir.display()
                    ));
                }
                Ok(InternalLocation {
                    prefix: prefix.clone(),
                    dir,
                })
            })
            .collect()
    }
}

/// A site's PHP application, shared (read-only) by every worker.
#[derive(Debug)]
pub struct PhpConfig {
    /// The document root, canonical (the site's `--root`).
    pub root: PathBuf,
    /// The directory script and front controller's file name.
    pub index: String,
    pub front_controller: bool,
    /// Extra FastCGI parameters.
    pub params: Vec<(String, String)>,
    pub internal: Vec<InternalLocation>,
    /// What `SERVER_*` says.
    pub server: Arc<ServerVars>,
}
