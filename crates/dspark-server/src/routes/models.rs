//! `GET /v1/models` (and `/models`), `GET /v1/models/{id}`: the one served model.

use axum::extract::{Path, State};
use axum::Json;

use crate::error::ApiError;
use crate::openapi::{ModelList, ModelObject, ModelXDspark};
use crate::AppState;

fn model_object(st: &AppState) -> ModelObject {
    let info = st.engine.info();
    ModelObject {
        id: st.cfg.model_id.clone(),
        object: "model",
        created: st.cfg.created,
        owned_by: "dspark",
        x_dspark: ModelXDspark {
            mode: info.mode.clone(),
            target: info.model_path.clone(),
            drafter: info.drafter.clone(),
            context_length: info.context_len,
        },
    }
}

pub async fn list(State(st): State<AppState>) -> Json<ModelList> {
    Json(ModelList {
        object: "list",
        data: vec![model_object(&st)],
    })
}

pub async fn get(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<ModelObject>, ApiError> {
    if id == st.cfg.model_id {
        Ok(Json(model_object(&st)))
    } else {
        Err(ApiError::NotFound(format!(
            "the model `{id}` does not exist; this server serves `{}`",
            st.cfg.model_id
        )))
    }
}
