"""Masked-entity association scores (Srinivasan & Bisk 2022, "Worst of Both Worlds").

How visual-linguistic pre-training, the language context and the visual context shift the
probability a masked-language-model head gives a gendered entity ("The [AGENT] is carrying a
[MASK]." -> purse / briefcase):

    vlbias.suites.mlm.stimuli      entities, templates and stereotype labels; the case study's image manifest
    vlbias.suites.mlm.probability  ln P([MASK] = E | caption, image): multi-piece entities by the chain rule;
                            "no visual input" as each model adapter defines it
    vlbias.suites.mlm.scores       S_PT, S_L, S_V, B(E) = S(E, female) - S(E, male); the tables

The models are the vision-language adapters of vlbias.models (visualbert, lxmert) and the
text-only reference ``bert_mlm`` (vlbias.models.bert_mlm); figures and tables: vlbias.report.mlm.
"""
