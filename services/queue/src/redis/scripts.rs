//! The Lua scripts that make every multi-step change of the Redis queue
//! atomic. Each is `lua/prelude.lua` (keys and helpers) followed by its body.

use std::sync::LazyLock;

use redis::Script;

pub(super) struct Scripts {
    pub enqueue: Script,
    pub fetch: Script,
    pub extend: Script,
    pub ack: Script,
    pub release: Script,
    pub dead_letter: Script,
    pub reclaim: Script,
    pub forget_consumers: Script,
    pub depth: Script,
    pub depth_by_tenant: Script,
}

const PRELUDE: &str = include_str!("lua/prelude.lua");

fn script(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}\n{body}"))
}

pub(super) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    enqueue: script(include_str!("lua/enqueue.lua")),
    fetch: script(include_str!("lua/fetch.lua")),
    extend: script(include_str!("lua/extend.lua")),
    ack: script(include_str!("lua/ack.lua")),
    release: script(include_str!("lua/release.lua")),
    dead_letter: script(include_str!("lua/dead_letter.lua")),
    reclaim: script(include_str!("lua/reclaim.lua")),
    forget_consumers: script(include_str!("lua/forget_consumers.lua")),
    depth: script(include_str!("lua/depth.lua")),
    depth_by_tenant: script(include_str!("lua/depth_by_tenant.lua")),
});
