pub mod audit;
pub mod escalation;
pub mod notification;
pub mod policy;
pub mod proposal;
pub mod reference;
pub mod view;

pub use audit::AuditApi;
pub use escalation::EscalationApi;
pub use notification::NotificationApi;
pub use policy::PolicyApi;
pub use proposal::ProposalApi;
pub use reference::{SopApi, TargetApi};
pub use view::{Receipts, Viewer, Views};

/// A page's encoded size stays under this whatever its page size, far below
/// the 4 MiB a client decodes by default: the largest SOP or target the
/// validation rules allow is about 35 KB, so a page holds at least 29 of
/// them; an escalation (its proposal, gates and votes) at least one.
const PAGE_BYTES: usize = 1024 * 1024;

/// One page of `rows` (read with one more than `page_size` asked for): at
/// most `page_size` of them and, past the first, only while the page stays
/// under [`PAGE_BYTES`]. The token (`token` of the last one on the page)
/// continues after it, empty when nothing follows.
fn page<R, W: prost::Message>(
    rows: Vec<R>,
    page_size: u32,
    token: impl Fn(&R) -> String,
    to_wire: impl Fn(&R) -> W,
) -> (Vec<W>, String) {
    let total = rows.len();
    let mut wire = Vec::new();
    let mut bytes = 0;
    let mut last = None;
    for row in rows.iter().take(page_size as usize) {
        let item = to_wire(row);
        // The length prefix and tag of a repeated field: at most 6 bytes.
        let size = item.encoded_len() + 6;
        if !wire.is_empty() && bytes + size > PAGE_BYTES {
            break;
        }
        bytes += size;
        wire.push(item);
        last = Some(row);
    }
    let token = match last {
        Some(last) if wire.len() < total => token(last),
        _ => String::new(),
    };
    (wire, token)
}
