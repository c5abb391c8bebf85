//! An agent's skills at turn time: each entry of the spec's `skills` resolved to its source (a
//! git repository named inline, a skill of the registry, or a local directory the embedding
//! program registered), fetched on the host, mounted read-only into the session's sandbox, and
//! described to the model by name and description ([`SkillNote`]).
//!
//! Git credentials come from `config.sandbox.network_policy.auth_inject` entries of type `git`;
//! they reach git on the host and nothing else: not the sandbox, not the model, not an error.
//! A git URL written in the spec is a member's, so it may lead only where the egress policy
//! allows; a registry skill's URL is the operator's.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::future::try_join_all;
use teamster_engine::SkillNote;
use teamster_protocol::AgentSpec;
use teamster_protocol::agent::{SkillMount, TaggedSkill};
use teamster_protocol::settings::SkillManifest;
use teamster_sandbox::{SKILLS_DIR, is_skill_name};
use teamster_skills::{GitAuth, GitSource, Skill, SkillCache, SkillError};
use teamster_egress::EgressPolicy;
use teamster_store::SettingsStore;

use crate::error::{Result, ServiceError};
use crate::sandboxes::{TurnSandbox, wanted};
use crate::skills::{self, is_resource_name};

/// The most skills one agent may have.
pub const MAX_SKILLS: usize = 32;

/// Where skills come from on this host: a cache of git skills, and local directories by name.
#[derive(Debug)]
pub struct SkillSources {
    cache: SkillCache,
    local: BTreeMap<String, PathBuf>,
    /// Where git URLs written in specs may lead (public addresses only by default).
    egress: Arc<EgressPolicy>,
}

impl SkillSources {
    /// Skills fetched into `cache`, and no local ones.
    pub fn new(cache: SkillCache) -> SkillSources {
        SkillSources { cache, local: BTreeMap::new(), egress: Arc::default() }
    }

    /// The same sources letting git URLs written in specs reach what `egress` allows.
    pub fn with_egress(mut self, egress: Arc<EgressPolicy>) -> SkillSources {
        self.egress = egress;
        self
    }

    /// The same sources with the skill in `dir` (a directory with a `SKILL.md`), which agents
    /// name as `{"name": name}`; it takes precedence over a registry skill of the same name.
    /// For programs that embed the service: callers of an HTTP API cannot name host paths.
    pub fn with_local(mut self, name: impl Into<String>, dir: impl Into<PathBuf>) -> SkillSources {
        self.local.insert(name.into(), dir.into());
        self
    }
}

/// Where a skill comes from, once its entry is resolved.
enum Source {
    Git(GitSource),
    Local { name: String, dir: PathBuf },
}

/// One entry of a spec's `skills`, understood.
struct Entry<'a> {
    /// The name it is mounted under.
    name: &'a str,
    kind: EntryKind<'a>,
    preload: bool,
}

enum EntryKind<'a> {
    Git { url: &'a str, reference: &'a str, path: Option<&'a str> },
    /// A skill of the registry (or a local one), by name.
    Named,
}

fn entries(spec: &AgentSpec) -> Vec<Entry<'_>> {
    let skills = spec.skills.as_deref().unwrap_or_default();
    skills
        .iter()
        .map(|mount| match mount {
            SkillMount::Tagged(TaggedSkill::Git { url, path, name, reference }) => Entry {
                name,
                kind: EntryKind::Git { url, reference, path: path.as_deref() },
                preload: false,
            },
            SkillMount::Tagged(TaggedSkill::Registry { fqn, preload }) => {
                Entry { name: registry_name(fqn), kind: EntryKind::Named, preload: preload.unwrap_or(false) }
            }
            SkillMount::Named { name } => Entry { name, kind: EntryKind::Named, preload: false },
        })
        .collect()
}

/// The registry name a skill FQN names: `skill:<tenant>/<name>:<version>` gives `<name>` (this
/// registry keeps one version of each skill); a bare name is itself.
fn registry_name(fqn: &str) -> &str {
    let fqn = fqn.strip_prefix("skill:").unwrap_or(fqn);
    let last = fqn.rsplit('/').next().unwrap_or(fqn);
    last.split(':').next().unwrap_or(last)
}

/// Checks a spec's `skills` (400, param `skills`, naming the entry): at most [`MAX_SKILLS`],
/// names that are unique and valid, git sources as a fetch checks them, no credentials in URLs,
/// and a sandbox to mount them into.
pub(crate) fn validate(spec: &AgentSpec) -> Result<()> {
    let entries = entries(spec);
    if entries.is_empty() {
        return Ok(());
    }
    let invalid = |index: usize, message: String| ServiceError::invalid_param("skills", format!("skills[{index}]: {message}"));
    if entries.len() > MAX_SKILLS {
        return Err(ServiceError::invalid_param("skills", format!("an agent has at most {MAX_SKILLS} skills")));
    }
    if wanted(spec).is_none() {
        return Err(ServiceError::invalid_param(
            "skills",
            "skills are mounted into the agent's sandbox: enable it (config.sandbox.enabled: true)",
        ));
    }
    let mut names = HashSet::new();
    for (index, entry) in entries.iter().enumerate() {
        if !names.insert(entry.name) {
            return Err(invalid(index, format!("two skills are named {:?}", entry.name)));
        }
        match entry.kind {
            // Registry names are resource names; a local skill's name is any safe directory name.
            EntryKind::Named if !is_resource_name(entry.name) && !is_skill_name(entry.name) => {
                return Err(invalid(index, format!("{:?} names no skill", short(entry.name))));
            }
            EntryKind::Named => {}
            EntryKind::Git { url, reference, path } => {
                if skills::url_has_credentials(url) {
                    return Err(invalid(
                        index,
                        "the URL must not carry credentials; give them in config.sandbox.network_policy.auth_inject".to_owned(),
                    ));
                }
                let source = git_source(entry.name, url, reference, path);
                if let Err(error) = source.check() {
                    return Err(invalid(index, error.to_string()));
                }
            }
        }
    }
    Ok(())
}

fn git_source(name: &str, url: &str, reference: &str, path: Option<&str>) -> GitSource {
    GitSource { name: name.to_owned(), url: url.to_owned(), reference: reference.to_owned(), path: path.map(str::to_owned) }
}

/// The git credentials a spec gives: its `auth_inject` entries of type `git` with basic auth.
fn git_auth(spec: &AgentSpec) -> Vec<GitAuth> {
    let injected = wanted(spec).and_then(|sandbox| sandbox.network_policy.as_ref()).and_then(|policy| policy.auth_inject.as_ref());
    injected
        .into_iter()
        .flatten()
        .filter(|inject| inject.kind == "git" && inject.auth_data.kind == "basic")
        .map(|inject| GitAuth {
            hosts: inject.matches.hosts.clone(),
            username: inject.auth_data.username.clone(),
            password: inject.auth_data.password.clone(),
        })
        .collect()
}

impl TurnSandbox {
    /// Fetches the spec's skills (all at once), mounts each into this sandbox, and returns
    /// what the model is told about them, in the spec's order. A skill that cannot be had
    /// fails the turn, with git's message (secrets redacted).
    pub(crate) async fn mount_skills(&self, store: &dyn SettingsStore, spec: &AgentSpec) -> std::result::Result<Vec<SkillNote>, String> {
        let entries = entries(spec);
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let auth = git_auth(spec);
        let fetches = entries.iter().map(|entry| {
            let auth = &auth;
            async move {
                let skill = self.fetch(store, entry, auth).await.map_err(|error| format!("The skill {:?} is unavailable: {error}.", entry.name))?;
                self.provider
                    .mount_skill(&self.sandbox_id, &skill.name, &skill.dir)
                    .await
                    .map_err(|error| format!("The skill {:?} could not be mounted: {error}.", entry.name))?;
                Ok::<_, String>(SkillNote {
                    path: format!("{SKILLS_DIR}/{}/SKILL.md", skill.name),
                    preloaded: entry.preload.then(|| skill.body.clone()),
                    name: skill.name,
                    description: skill.description,
                })
            }
        });
        try_join_all(fetches).await
    }

    async fn fetch(&self, store: &dyn SettingsStore, entry: &Entry<'_>, auth: &[GitAuth]) -> std::result::Result<Skill, String> {
        let (source, egress) = match entry.kind {
            EntryKind::Git { url, reference, path } => {
                (Source::Git(git_source(entry.name, url, reference, path)), Some(self.skills.egress.as_ref()))
            }
            EntryKind::Named => match self.skills.local.get(entry.name) {
                Some(dir) => (Source::Local { name: entry.name.to_owned(), dir: dir.clone() }, None),
                None => (Source::Git(registry_source(store, entry.name).await?), None),
            },
        };
        let fetched = match &source {
            Source::Git(source) => self.skills.cache.fetch_git_within(source, auth, egress).await,
            Source::Local { name, dir } => self.skills.cache.load_local(name, dir).await,
        };
        fetched.map_err(|error| match error {
            // The host's own failures are logged whole and said briefly.
            SkillError::Io { .. } => {
                tracing::error!(skill = entry.name, %error, "a skill could not be read on the host");
                "the host could not read it".to_owned()
            }
            other => other.to_string(),
        })
    }
}

/// The git source of a registry skill.
async fn registry_source(store: &dyn SettingsStore, name: &str) -> std::result::Result<GitSource, String> {
    let stored = store
        .get_setting(skills::SETTING_KIND, name)
        .await
        .map_err(|error| format!("the skill registry could not be read: {error}"))?
        .ok_or_else(|| "no skill of that name is configured (/api/v1/settings/skills)".to_owned())?;
    let manifest: SkillManifest = serde_json::from_str(&stored).map_err(|error| format!("its stored manifest is unreadable: {error}"))?;
    Ok(git_source(name, &manifest.url, &manifest.reference, manifest.path.as_deref()))
}

fn short(text: &str) -> String {
    text.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(skills: serde_json::Value, sandbox: bool) -> AgentSpec {
        serde_json::from_value(serde_json::json!({
            "model": {"name": "offline/echo"},
            "skills": skills,
            "config": {"sandbox": {"enabled": sandbox}},
        }))
        .unwrap()
    }

    #[test]
    fn registry_fqns_name_the_skill() {
        for (fqn, name) in [("skill:tenant/pdf:3", "pdf"), ("skill:a/b/csv-tools:1", "csv-tools"), ("pdf", "pdf"), ("pdf:2", "pdf")] {
            assert_eq!(registry_name(fqn), name, "{fqn}");
        }
    }

    #[test]
    fn skills_are_checked_entry_by_entry() {
        let git = |name: &str, url: &str, reference: &str| serde_json::json!({"type": "git", "name": name, "url": url, "ref": reference});
        let good = git("pdf", "git://127.0.0.1/skills.git", "main");
        let cases = [
            (serde_json::json!([good]), true, None),
            (serde_json::json!([good, {"type": "truefoundry-skills-registry", "fqn": "skill:t/csv:1", "preload": true}, {"name": "notes"}]), true, None),
            (serde_json::json!([good]), false, Some("enable it")),
            (serde_json::json!([good, good]), true, Some("skills[1]: two skills are named \"pdf\"")),
            (serde_json::json!([git("pdf", "https://u:secret@example.com/a.git", "main")]), true, Some("must not carry credentials")),
            (serde_json::json!([git("pdf", "file:///etc", "main")]), true, Some("skills[0]: invalid skill url")),
            (serde_json::json!([git("pdf", "https://example.com/a.git", "--upload-pack=x")]), true, Some("skills[0]: invalid skill ref")),
            (serde_json::json!([git("../x", "https://example.com/a.git", "main")]), true, Some("skills[0]: invalid skill name")),
            (serde_json::json!([{"name": "a/b"}]), true, Some("names no skill")),
            (serde_json::Value::Array((0..=MAX_SKILLS).map(|i| serde_json::json!({"name": format!("s{i}")})).collect()), true, Some("at most")),
        ];
        for (skills, sandbox, expected) in cases {
            let result = validate(&spec(skills.clone(), sandbox));
            match (result, expected) {
                (Ok(()), None) => {}
                (Err(ServiceError::Invalid { message, param: Some("skills") }), Some(expected)) => {
                    assert!(message.contains(expected), "{message:?} should contain {expected:?}");
                }
                (other, _) => panic!("{skills}: unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn only_git_basic_auth_entries_become_git_credentials() {
        let spec: AgentSpec = serde_json::from_value(serde_json::json!({
            "model": {"name": "offline/echo"},
            "config": {"sandbox": {"enabled": true, "network_policy": {"auth_inject": [
                {"type": "git", "match": {"hosts": ["git.example.com"]}, "auth_data": {"type": "basic", "username": "u", "password": "p"}},
                {"type": "http", "match": {"hosts": ["api.example.com"]}, "auth_data": {"type": "basic", "username": "x", "password": "y"}},
            ]}}},
        }))
        .unwrap();
        let auth = git_auth(&spec);
        assert_eq!(auth.len(), 1);
        assert_eq!((auth[0].hosts.as_slice(), auth[0].username.as_str()), (&["git.example.com".to_owned()][..], "u"));
    }
}
