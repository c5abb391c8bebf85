//! What the runtime tests share.

use serde_json::json;
use teamster::runtime::Runtime;
use teamster_fake_model::FakeModelServer;

/// Adds the provider `fake`, whose model `fake-model` is the fake model server `model`.
pub async fn add_fake_provider(runtime: &Runtime, model: &FakeModelServer) {
    let provider = json!({
        "type": "custom", "name": "fake", "base_url": model.base_url(), "auth": {"api_key": "k"},
        "models": [{"name": "fake-model", "model_id": "fake-model"}],
    });
    runtime.add_model_provider(serde_json::from_value(provider).unwrap()).await.unwrap();
}
