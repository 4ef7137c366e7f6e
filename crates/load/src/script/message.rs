//! A script's error as one line: the file, the line and the message, as Lua says them
//! (`script.lua:12: attempt to ...`), without the traceback.

/// One line for a script error: the file, line and message (`script.lua:12: attempt to ...`),
/// without the traceback. An error raised by the API itself (a bad argument, a value that cannot
/// cross to a thread) gets the line of the script that called it.
pub(crate) fn describe(err: &mlua::Error, name: &str) -> String {
    let mut cause = err;
    let mut traceback = None;
    while let mlua::Error::CallbackError {
        cause: c,
        traceback: t,
    } = cause
    {
        traceback.get_or_insert(t.as_str());
        cause = c;
    }
    let full = match cause {
        mlua::Error::RuntimeError(m) | mlua::Error::SyntaxError { message: m, .. } => m.clone(),
        other => other.to_string(),
    };
    let message = full.lines().next().unwrap_or_default().trim();
    if has_location(message) {
        return message.to_owned();
    }
    let location = traceback
        .into_iter()
        .chain(std::iter::once(full.as_str()))
        .flat_map(str::lines)
        .filter_map(|l| l.trim().split_once(": in "))
        .map(|(at, _)| at)
        .find(|at| !at.starts_with('[') && has_location(&format!("{at}: ")));
    match location {
        Some(at) => format!("{at}: {message}"),
        None => format!("{name}: {message}"),
    }
}

/// Whether a message starts with `source:line:`.
fn has_location(message: &str) -> bool {
    message.split(": ").next().is_some_and(|head| {
        head.rsplit_once(':').is_some_and(|(src, line)| {
            !src.is_empty() && !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit())
        })
    }) && message.contains(": ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlua::Lua;

    fn run(source: &str) -> String {
        let lua = Lua::new();
        let f = lua.create_function(|_, ()| -> mlua::Result<()> {
            Err(mlua::Error::runtime("cannot transfer 'function' to thread"))
        });
        lua.globals().set("api", f.unwrap()).unwrap();
        let err = lua
            .load(source)
            .set_name("@x.lua")
            .exec()
            .expect_err("the chunk fails");
        describe(&err, "x.lua")
    }

    /// Errors read as `file:line: message`, on one line, wherever they were raised.
    #[test]
    fn errors_are_one_line_with_the_place() {
        assert_eq!(
            run("local a = nil\nreturn a.b"),
            "x.lua:2: attempt to index local 'a' (a nil value)"
        );
        assert_eq!(run("\n\nerror('boom')"), "x.lua:3: boom");
        assert_eq!(run("x = = 1"), "x.lua:1: unexpected symbol near '='");
        assert_eq!(
            run("function f()\n  api()\nend\nf()"),
            "x.lua:2: cannot transfer 'function' to thread"
        );
        assert_eq!(run("\nerror('no place', 0)"), "x.lua:2: no place");
    }
}
