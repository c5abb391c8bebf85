//! The skill registry: skills configured through `/api/v1/settings/skills`, stored in the
//! settings store (so every replica reads the same), and named by agents.
//!
//! A skill is a directory of a git repository with a `SKILL.md`. The manifest is checked when
//! it is stored, with the checks a fetch makes (`GitSource::check`); fetching it is the
//! sandbox's business, at turn time.

use std::sync::Arc;

use teamster_protocol::settings::{AvailableSkill, ConfiguredSkill, SkillManifest};
use teamster_protocol::timestamp;
use teamster_skills::{GitSource, SkillError};
use teamster_store::SettingsStore;

use crate::error::{Result, ServiceError};

/// The settings kind under which skills are stored.
pub(crate) const SETTING_KIND: &str = "skill";
const MAX_DESCRIPTION_CHARS: usize = 1024;

/// How a skill write treats an existing skill of the same name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkillWrite {
    /// `POST`: fail if the name is taken.
    Create,
    /// `PUT`: create or replace.
    Upsert,
}

/// The skill registry (`service.skills()`), on the settings store alone.
#[derive(Clone)]
pub struct SkillRegistry {
    settings: Arc<dyn SettingsStore>,
}

impl SkillRegistry {
    pub(crate) fn new(settings: Arc<dyn SettingsStore>) -> SkillRegistry {
        SkillRegistry { settings }
    }

    /// Every configured skill, by name.
    pub async fn list_skill_settings(&self) -> Result<Vec<ConfiguredSkill>> {
        let mut skills = Vec::new();
        for (name, value) in self.settings.list_settings(SETTING_KIND).await? {
            match serde_json::from_str::<SkillManifest>(&value) {
                Ok(manifest) => skills.push(ConfiguredSkill { name, manifest }),
                Err(error) => tracing::error!(skill = %name, %error, "stored skill is unreadable; skipped"),
            }
        }
        Ok(skills)
    }

    /// The skills agents can name, with what each is for.
    pub async fn list_available_skills(&self) -> Result<Vec<AvailableSkill>> {
        Ok(self
            .list_skill_settings()
            .await?
            .into_iter()
            .map(|skill| AvailableSkill { name: skill.name, description: skill.manifest.description })
            .collect())
    }

    /// A configured skill by name, if there is one.
    pub async fn skill_setting(&self, name: &str) -> Result<Option<SkillManifest>> {
        match self.settings.get_setting(SETTING_KIND, name).await? {
            None => Ok(None),
            Some(value) => serde_json::from_str(&value)
                .map(Some)
                .map_err(|error| ServiceError::Unprocessable(format!("the stored skill {name:?} is unreadable: {error}"))),
        }
    }

    /// Creates or replaces a skill.
    pub async fn write_skill(&self, manifest: SkillManifest, mode: SkillWrite) -> Result<ConfiguredSkill> {
        validate_manifest(&manifest)?;
        let name = manifest.name.clone();
        if mode == SkillWrite::Create && self.settings.get_setting(SETTING_KIND, &name).await?.is_some() {
            return Err(ServiceError::Conflict { code: "already_exists", message: format!("a skill named {name:?} already exists") });
        }
        let value = serde_json::to_string(&manifest).map_err(|error| ServiceError::invalid(error.to_string()))?;
        self.settings.put_setting(SETTING_KIND, &name, &value, &timestamp::now()).await?;
        Ok(ConfiguredSkill { name, manifest })
    }
}

/// Checks a skill manifest against the specs' rules (400 naming the field otherwise): the
/// registry's name rule and a description here; the URL, ref and path as a fetch checks them,
/// and no credentials in the URL (they belong in `config.sandbox.network_policy.auth_inject`).
pub(crate) fn validate_manifest(manifest: &SkillManifest) -> Result<()> {
    if !is_resource_name(&manifest.name) {
        return Err(ServiceError::invalid_param(
            "manifest.name",
            "a skill name has 2-64 characters: lowercase letters, digits, '.', '_' and '-', starting with a letter and \
             ending with a letter or digit",
        ));
    }
    let description = manifest.description.trim();
    if description.is_empty() || description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(ServiceError::invalid_param("manifest.description", format!("a description has 1-{MAX_DESCRIPTION_CHARS} characters")));
    }
    if url_has_credentials(&manifest.url) {
        return Err(ServiceError::invalid_param(
            "manifest.url",
            "the URL must not carry credentials; give them in config.sandbox.network_policy.auth_inject",
        ));
    }
    let source = GitSource {
        name: manifest.name.clone(),
        url: manifest.url.clone(),
        reference: manifest.reference.clone(),
        path: manifest.path.clone(),
    };
    match source.check() {
        Ok(()) => Ok(()),
        Err(SkillError::Invalid { field, reason }) => {
            let param = match field {
                "url" => "manifest.url",
                "ref" => "manifest.ref",
                "path" => "manifest.path",
                _ => "manifest.name",
            };
            Err(ServiceError::invalid_param(param, reason))
        }
        Err(other) => Err(ServiceError::invalid_param("manifest", other.to_string())),
    }
}

/// Whether a URL carries credentials (`user:password@` before its host).
pub(crate) fn url_has_credentials(url: &str) -> bool {
    let authority = url.split_once("://").map_or("", |(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or_default());
    authority.contains('@')
}

/// `ResourceName`: `^[a-z](?:[a-z0-9._-]{0,62}[a-z0-9])$`.
pub(crate) fn is_resource_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else { return false };
    (2..=64).contains(&bytes.len())
        && first.is_ascii_lowercase()
        && (last.is_ascii_lowercase() || last.is_ascii_digit())
        && bytes.iter().all(|&byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || b"._-".contains(&byte))
}

#[cfg(test)]
mod tests {
    use super::*;
    use teamster_protocol::settings::SkillType;

    fn manifest(name: &str, url: &str, reference: &str, path: Option<&str>) -> SkillManifest {
        SkillManifest {
            kind: SkillType::Git,
            name: name.to_owned(),
            description: "Reads PDFs.".to_owned(),
            url: url.to_owned(),
            reference: reference.to_owned(),
            path: path.map(str::to_owned),
        }
    }

    #[test]
    fn manifests_are_checked_field_by_field() {
        let good = "https://github.com/acme/skills";
        for (case, expected) in [
            (manifest("pdf-reader", good, "main", Some("skills/pdf")), None),
            (manifest("pdf", "git://127.0.0.1:9418/skills.git", "v1.2", None), None),
            (manifest("PDF", good, "main", None), Some("manifest.name")),
            (manifest("p", good, "main", None), Some("manifest.name")),
            (manifest("pdf-", good, "main", None), Some("manifest.name")),
            (manifest("pdf", "file:///etc", "main", None), Some("manifest.url")),
            (manifest("pdf", "ext::sh -c id", "main", None), Some("manifest.url")),
            (manifest("pdf", "https://user:secret@github.com/a/b", "main", None), Some("manifest.url")),
            (manifest("pdf", "https://github.com", "main", None), Some("manifest.url")),
            (manifest("pdf", good, "--upload-pack=x", None), Some("manifest.ref")),
            (manifest("pdf", good, "a/../b", None), Some("manifest.ref")),
            (manifest("pdf", good, "main", Some("../up")), Some("manifest.path")),
            (manifest("pdf", good, "main", Some("/abs")), Some("manifest.path")),
        ] {
            let param = match validate_manifest(&case) {
                Ok(()) => None,
                Err(ServiceError::Invalid { param, .. }) => param,
                Err(other) => panic!("unexpected {other:?}"),
            };
            assert_eq!(param, expected, "{case:?}");
        }
    }
}
