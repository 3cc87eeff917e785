"""The intermediate form: the Model (a frozen GraphDef plus its signature), graph helpers, static
evaluation, TF1 loops, and observed value ranges."""
