//! An event as handed to watchers, with its wire form built once per view.

use std::sync::OnceLock;

use countersign_domain::Event;
use countersign_proto::{convert::event::notification, v1};

pub struct Published {
    pub event: Event,
    full: OnceLock<v1::Notification>,
    agent: OnceLock<v1::Notification>,
}

impl Published {
    pub fn new(event: Event) -> Self {
        Published {
            event,
            full: OnceLock::new(),
            agent: OnceLock::new(),
        }
    }

    /// The notification as this viewer may see it (agents: the terse view).
    pub fn notification(&self, agent_viewer: bool) -> &v1::Notification {
        let cell = if agent_viewer {
            &self.agent
        } else {
            &self.full
        };
        cell.get_or_init(|| notification(&self.event, agent_viewer))
    }
}
