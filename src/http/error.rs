//! What a refused HTTP request gets: a status and `{"error": "…"}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::engine::AdminError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }

    /// Something on the server side failed: a 500 that says what.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// The store failed to keep a change the engine made.
    pub fn unstored() -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the store failed to write this change; it may not survive a restart",
        )
    }
}

impl From<AdminError> for ApiError {
    fn from(e: AdminError) -> ApiError {
        let (status, message) = match e {
            AdminError::NoSuchTube => (StatusCode::NOT_FOUND, "no such tube"),
            AdminError::NoSuchJob => (StatusCode::NOT_FOUND, "no such job"),
            AdminError::Reserved => (
                StatusCode::CONFLICT,
                "the job is reserved: the worker holding it decides",
            ),
            AdminError::WrongState => (
                StatusCode::CONFLICT,
                "the job is ready: only buried or delayed jobs can be kicked",
            ),
            AdminError::Held => (
                StatusCode::CONFLICT,
                "the job waits for its aft: group: release its hold to run it now",
            ),
            AdminError::NotHeld => (
                StatusCode::CONFLICT,
                "the job is not held by its aft: group",
            ),
            AdminError::Draining => (StatusCode::SERVICE_UNAVAILABLE, "draining: no new jobs"),
            AdminError::OutOfMemory => (
                StatusCode::SERVICE_UNAVAILABLE,
                "out of memory, or the store is refusing writes",
            ),
        };
        ApiError::new(status, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message });
        (self.status, Json(body)).into_response()
    }
}
