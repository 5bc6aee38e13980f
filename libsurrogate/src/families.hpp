// The model families of this build, one line per architecture (share/docs/adding-a-family.md):
// SURROGATE_MODEL(family, architecture, factory) registers `surrogate::family::factory(const ModelFile&)`
// for model files whose `architecture` attribute is `architecture`. Included by registry.cpp only.
SURROGATE_MODEL(bsa, "bsa", make_model)
SURROGATE_MODEL(erwin, "erwin", make_model)
SURROGATE_MODEL(flare, "flare", make_model)
SURROGATE_MODEL(hept, "hept", make_model)
SURROGATE_MODEL(sequoia, "sequoia", make_model)
SURROGATE_MODEL(sphere, "sphere_transformer", make_transformer_model)
SURROGATE_MODEL(sphere, "s2_attention", make_attention_model)
SURROGATE_MODEL(sphere, "s2_neighborhood_attention", make_neighborhood_attention_model)
