//! axum's extractors with the API's JSON errors instead of plain text.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::response::IntoResponse;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// A JSON request body (`Content-Type: application/json`).
pub struct Json<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(request, state).await {
            Ok(axum::Json(value)) => Ok(Json(value)),
            Err(e) => Err(rejected(e)),
        }
    }
}

/// The query string.
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Query(value)),
            Err(e) => Err(rejected(e)),
        }
    }
}

/// axum's rejection, its status kept, its text as our JSON error.
fn rejected(e: impl IntoResponse + std::fmt::Display) -> ApiError {
    let message = e.to_string();
    ApiError::new(e.into_response().status(), message)
}
