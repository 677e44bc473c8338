//! `GET /v1/models` (and `/models`), `GET /v1/models/{id}`: the one served model.

use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::AppState;

fn model_object(st: &AppState) -> Value {
    let info = st.engine.info();
    json!({
        "id": st.cfg.model_id,
        "object": "model",
        "created": st.cfg.created,
        "owned_by": "dspark",
        "x_dspark": {"mode": info.mode, "target": info.model_path, "drafter": info.drafter, "context_length": info.context_len},
    })
}

pub async fn list(State(st): State<AppState>) -> Json<Value> {
    Json(json!({"object": "list", "data": [model_object(&st)]}))
}

pub async fn get(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if id == st.cfg.model_id {
        Ok(Json(model_object(&st)))
    } else {
        Err(ApiError::NotFound(format!(
            "the model `{id}` does not exist; this server serves `{}`",
            st.cfg.model_id
        )))
    }
}
