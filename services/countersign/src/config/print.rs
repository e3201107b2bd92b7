//! `countersign config print`: the effective configuration as TOML, secrets
//! masked (a URL's password and the signing key become `****`).

use super::Config;

pub const MASK: &str = "****";

/// `scheme://user:****@host/…`; a URL without a password is unchanged.
pub fn mask_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:{MASK}{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

pub fn to_masked_toml(config: &Config) -> anyhow::Result<String> {
    let mut shown = config.clone();
    shown.database.url = shown.database.url.as_deref().map(mask_url);
    shown.redis.url = shown.redis.url.as_deref().map(mask_url);
    if shown.audit.signing_key.is_some() {
        shown.audit.signing_key = Some(MASK.to_owned());
    }
    Ok(toml::to_string_pretty(&shown)?)
}
