"""The check every error test makes: the call raises msa.Error (a ValueError) naming `argument`,
with the C++ layer's text "msa: <argument> = <value>: <why>"."""

import pytest

import msa


def expect_error(argument, fn, *args, **kwargs):
    with pytest.raises(msa.Error) as e:
        fn(*args, **kwargs)
    assert isinstance(e.value, ValueError)
    assert e.value.argument == argument, str(e.value)
    assert str(e.value).startswith(f"msa: {argument} = "), str(e.value)
    return e.value
