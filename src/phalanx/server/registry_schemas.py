"""The model registry's REST shapes (pydantic), built from phalanx.registry's records."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from phalanx.store.registry_records import ModelVersion, RegisteredModel


class RegisteredModelOut(BaseModel):
    name: str
    description: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    latest_version: int | None = None
    aliases: dict[str, int] = Field(default_factory=dict, description="alias -> version")
    project: str = Field("default", description="whose viewers read it and whose editors change it")
    created_at: float
    updated_at: float

    @classmethod
    def of(cls, m: RegisteredModel) -> RegisteredModelOut:
        return cls(
            name=m.name,
            description=m.description,
            tags=m.tags,
            latest_version=m.latest_version,
            aliases=m.aliases,
            project=m.project,
            created_at=m.created_at,
            updated_at=m.updated_at,
        )


class ModelVersionOut(BaseModel):
    name: str
    version: int
    aliases: list[str] = Field(default_factory=list)
    experiment_id: str = Field(description="the experiment the model came from (its lineage)")
    source: str = Field(description="the model's file name in that experiment")
    sha256: str
    size: int
    signature: dict[str, Any] = Field(description="inputs and outputs: name, dtype, shape (null: dynamic)")
    lineage: dict[str, Any] = Field(description="experiment, params, final metrics, snapshot, parity")
    description: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    created_at: float

    @classmethod
    def of(cls, v: ModelVersion) -> ModelVersionOut:
        return cls(
            name=v.name,
            version=v.version,
            aliases=list(v.aliases),
            experiment_id=v.experiment_id,
            source=v.source,
            sha256=v.sha256,
            size=v.size,
            signature=v.signature,
            lineage=v.lineage,
            description=v.description,
            tags=v.tags,
            created_at=v.created_at,
        )


class RegisteredModelDetailOut(RegisteredModelOut):
    versions: list[ModelVersionOut] = Field(default_factory=list)


class RegisterIn(BaseModel):
    experiment_id: str = Field(description="the experiment id (or a unique prefix)")
    model: str | None = Field(None, description="the model's name in the experiment, when it saved several")
    description: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)


class AliasIn(BaseModel):
    version: int = Field(ge=1)


class ModelUpdateIn(BaseModel):
    description: str | None = None
    tags: dict[str, str | None] = Field(default_factory=dict, description="null removes a tag")
