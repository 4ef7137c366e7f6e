//! The thread objects of wrk's API: `setup(thread)` receives one per loader thread in the main
//! state (`thread:get(name)`, `thread:set(name, value)`, `thread:stop()`, `thread.addr`), and each
//! thread's own state has its own as `wrk.thread` (`wrk.thread:stop()` from `response()`).
//! Addresses (`wrk.lookup`, `thread.addr`) are userdata that print as `host:port`.
//!
//! Values cross between states by copy, as wrk copies them: nil, booleans, numbers, strings and
//! tables of those. The main state reaches a thread's state through its [`ThreadSlot`], whose
//! lock the thread's loop holds for each turn and lets go while it waits for events: a
//! `thread:get()` while the thread runs waits at most one turn, then reads the value the
//! thread's globals hold then (wrk reads the running thread's state without a lock).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use mlua::{Lua, MetaMethod, UserData, UserDataFields, UserDataMethods, Value};

use super::calls::ThreadScript;
use super::control::ThreadControl;

/// One loader thread as the main state sees it: its control, and its Lua state while the thread
/// is not running.
pub(crate) struct ThreadSlot {
    pub control: Arc<ThreadControl>,
    pub script: Mutex<Option<ThreadScript>>,
}

impl ThreadSlot {
    pub fn take(&self) -> Option<ThreadScript> {
        self.script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    pub fn put(&self, script: ThreadScript) {
        *self.lock() = Some(script);
    }

    /// The state, for one turn of the thread's loop (or one `get`/`set`).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Option<ThreadScript>> {
        self.script.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `thread` in `setup(thread)`, in the main state.
pub(crate) struct ThreadHandle(pub Arc<ThreadSlot>);

impl UserData for ThreadHandle {
    fn add_fields<F: UserDataFields<Self>>(fields: &mut F) {
        fields.add_field_method_get("addr", |_, this| Ok(Addr(this.0.control.addr())));
        fields.add_field_method_set("addr", |_, this, addr: mlua::UserDataRef<Addr>| {
            *this
                .0
                .control
                .addr
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = addr.0;
            Ok(())
        });
    }

    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        methods.add_method("get", |lua, this, name: mlua::LuaString| {
            let guard = this.0.lock();
            // Only while the state is out of its slot being set up (its own `init()`): nothing
            // of the main state runs then.
            let Some(script) = guard.as_ref() else {
                return Ok(Value::Nil);
            };
            let value: Value = script.lua().globals().get(name.to_str()?.as_ref())?;
            Transfer::from_lua(&value, 0)?.into_lua(lua)
        });
        methods.add_method("set", |_, this, (name, value): (mlua::LuaString, Value)| {
            let value = Transfer::from_lua(&value, 0)?;
            let guard = this.0.lock();
            if let Some(script) = guard.as_ref() {
                let lua = script.lua();
                lua.globals()
                    .set(name.to_str()?.as_ref(), value.into_lua(lua)?)?;
            }
            Ok(())
        });
        methods.add_method("stop", |_, this, ()| {
            this.0.control.stop.store(true, Ordering::Relaxed);
            Ok(())
        });
    }
}

/// `wrk.thread` in a thread's own state.
pub(crate) struct OwnThread(pub Arc<ThreadControl>);

impl UserData for OwnThread {
    fn add_fields<F: UserDataFields<Self>>(fields: &mut F) {
        fields.add_field_method_get("addr", |_, this| Ok(Addr(this.0.addr())));
    }

    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        methods.add_method("get", |lua, _, name: mlua::LuaString| {
            lua.globals().get::<Value>(name.to_str()?.as_ref())
        });
        methods.add_method("set", |lua, _, (name, value): (mlua::LuaString, Value)| {
            lua.globals().set(name.to_str()?.as_ref(), value)
        });
        methods.add_method("stop", |_, this, ()| {
            this.0.stop.store(true, Ordering::Relaxed);
            Ok(())
        });
    }
}

/// An address from `wrk.lookup()` or `thread.addr`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Addr(pub SocketAddr);

impl UserData for Addr {
    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        // wrk prints `host:port` (getnameinfo's numeric host, no brackets).
        methods.add_meta_method(MetaMethod::ToString, |_, this, ()| {
            Ok(format!("{}:{}", this.0.ip(), this.0.port()))
        });
        methods.add_meta_method(MetaMethod::Eq, |_, this, other: mlua::UserDataRef<Addr>| {
            Ok(this.0 == other.0)
        });
    }
}

/// Deepest table copied between states: deeper is taken for a table that contains itself.
const MAX_TRANSFER_DEPTH: usize = 64;

/// A value copied from one state to another.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Transfer {
    Nil,
    Bool(bool),
    Number(f64),
    String(Vec<u8>),
    Table(Vec<(Transfer, Transfer)>),
}

impl Transfer {
    pub fn from_lua(value: &Value, depth: usize) -> mlua::Result<Self> {
        Ok(match value {
            Value::Nil => Self::Nil,
            Value::Boolean(b) => Self::Bool(*b),
            #[allow(clippy::cast_precision_loss)] // Lua numbers are doubles in LuaJIT.
            Value::Integer(i) => Self::Number(*i as f64),
            Value::Number(n) => Self::Number(*n),
            Value::String(s) => Self::String(s.as_bytes().to_vec()),
            Value::Table(t) => {
                if depth >= MAX_TRANSFER_DEPTH {
                    return Err(mlua::Error::runtime(
                        "cannot transfer a table nested this deep (does it contain itself?)",
                    ));
                }
                let mut entries = Vec::new();
                t.for_each(|k: Value, v: Value| {
                    entries.push((
                        Self::from_lua(&k, depth + 1)?,
                        Self::from_lua(&v, depth + 1)?,
                    ));
                    Ok(())
                })?;
                Self::Table(entries)
            }
            other => {
                return Err(mlua::Error::runtime(format!(
                    "cannot transfer '{}' to thread",
                    other.type_name()
                )))
            }
        })
    }

    pub fn into_lua(self, lua: &Lua) -> mlua::Result<Value> {
        Ok(match self {
            Self::Nil => Value::Nil,
            Self::Bool(b) => Value::Boolean(b),
            Self::Number(n) => Value::Number(n),
            Self::String(s) => Value::String(lua.create_string(s)?),
            Self::Table(entries) => {
                let t = lua.create_table_with_capacity(0, entries.len())?;
                for (k, v) in entries {
                    t.raw_set(k.into_lua(lua)?, v.into_lua(lua)?)?;
                }
                Value::Table(t)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values copy between states as wrk copies them; functions and cycles are refused.
    #[test]
    fn values_transfer_between_states() {
        let a = Lua::new();
        let b = Lua::new();
        let v: Value = a
            .load(r#"return { 1, "two", x = { y = true }, [3.5] = false }"#)
            .eval()
            .unwrap();
        let t = Transfer::from_lua(&v, 0).unwrap();
        b.globals().set("v", t.into_lua(&b).unwrap()).unwrap();
        let ok: bool = b
            .load(r#"return v[1] == 1 and v[2] == "two" and v.x.y == true and v[3.5] == false"#)
            .eval()
            .unwrap();
        assert!(ok);
        let f: Value = a.load("return function() end").eval().unwrap();
        assert!(Transfer::from_lua(&f, 0).is_err());
        let cycle: Value = a.load("local t = {} t.t = t return t").eval().unwrap();
        assert!(Transfer::from_lua(&cycle, 0).is_err());
    }
}
